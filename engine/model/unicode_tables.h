#pragma once
// The generated Unicode tables (unicode_tables.cpp, from scripts/gen-unicode-tables.py). Every
// table is sorted by its first column.
#include <cstddef>
#include <cstdint>

namespace servelab::unicode::tables {

struct ClassRange { char32_t first, last; uint8_t klass; };   ///< klass 1 letter, 2 number
struct CombiningRange { char32_t first, last; uint8_t ccc; }; ///< non-zero classes only
struct Decomposition { char32_t cp, first, second; };         ///< canonical; second 0: singleton
struct Composition { char32_t first, second, cp; };           ///< primary composites
struct CodeRange { char32_t first, last; };

extern const char* const kUnicodeVersion;
extern const ClassRange kClassRanges[];
extern const size_t kClassRangesSize;
extern const CombiningRange kCombiningRanges[];
extern const size_t kCombiningRangesSize;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionsSize;
extern const Composition kCompositions[];
extern const size_t kCompositionsSize;
/// Code points that may change under NFC or combine with a preceding one.
extern const CodeRange kNfcMaybeRanges[];
extern const size_t kNfcMaybeRangesSize;

}  // namespace servelab::unicode::tables
