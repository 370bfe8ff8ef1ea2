#pragma once
// Reading integers from untrusted JSON. nlohmann's get<int>() casts a floating-point value with
// static_cast, which is undefined behaviour when it is out of range (4.4e42 into an int: found by
// fuzz_report) and silently truncates 2.5; these throw instead.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace servelab {

/// j as an integer of type T. Throws std::out_of_range when j is a number that is not a whole
/// value within T's range, and nlohmann's type_error when it is not a number.
template <typename T, typename Json>
T json_int(const Json& j) {
  if (j.is_number_float()) {
    const double v = j.template get<double>();
    // (double)max + 1 is exact for 32-bit types and rounds to 2^63 / 2^64 for 64-bit ones.
    if (!(v == std::floor(v)) || v < static_cast<double>(std::numeric_limits<T>::min()) ||
        !(v < static_cast<double>(std::numeric_limits<T>::max()) + 1.0))
      throw std::out_of_range("expected an integer, got " + j.dump());
    return static_cast<T>(v);
  }
  if (j.is_number_integer() && !j.is_number_unsigned()) {
    const auto v = j.template get<long long>();
    if (v < static_cast<long long>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<T>::max())))
      throw std::out_of_range("integer out of range: " + j.dump());
    return static_cast<T>(v);
  }
  if (j.is_number_unsigned()) {
    const auto v = j.template get<unsigned long long>();
    if (v > static_cast<unsigned long long>(std::numeric_limits<T>::max()))
      throw std::out_of_range("integer out of range: " + j.dump());
    return static_cast<T>(v);
  }
  return j.template get<T>();  // not a number: nlohmann's type_error
}

/// j[key] as json_int<T>, or `fallback` when the key is absent.
template <typename T, typename Json>
T json_int_or(const Json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  return it == j.end() ? fallback : json_int<T>(*it);
}

}  // namespace servelab
