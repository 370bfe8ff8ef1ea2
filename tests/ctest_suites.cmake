# Registers a test binary's GoogleTest cases with ctest when ctest runs (the root CMakeLists adds
# one include file per test_<folder> to TEST_INCLUDE_FILES; the list is made again when the binary
# or this script changes; nothing runs a test binary at build time). Set before including:
# TEST_EXECUTABLE, TEST_TARGET (test_<folder>), TEST_WORKING_DIR, CTEST_FILE (the add_test script
# written here), TEST_DISCOVERY_TIMEOUT, TEST_PER_CASE.
#   Non-GPU cases: one ctest test per GoogleTest suite, TEST_TARGET.SUITE
#     (--gtest_filter=SUITE.*-*Gpu*:*GPU*), its cases in one process; COST is its case count, so
#     ctest -j starts the larger suites first (a clean clone has no CTestCostData.txt). A failing
#     case names itself in the output (ctest --output-on-failure). TEST_PER_CASE ON: one test per
#     case instead, SUITE.CASE.
#   GPU cases (Gpu or GPU in the name): one test per case, SUITE.CASE, label gpu, as before
#     (`ctest -LE gpu` leaves them out; `ctest -L gpu` runs them on a GPU machine).
# Skipped (ctest's "Not Run"): only a test whose output ends with GoogleTest's summary of no case
# passed and every case skipped. A bare "[  SKIPPED ]" match would report a suite with one case
# skipped and another failed as skipped, not failed: ctest lets SKIP_REGULAR_EXPRESSION win over
# the exit code.
cmake_minimum_required(VERSION 3.24)

set(servelab_skip_regex "\\[  PASSED  \\] 0 tests\\.\n\\[  SKIPPED \\] [0-9]+ tests?, listed below:\n(\\[  SKIPPED \\] [^\n]*\n)*$")

function(servelab_ctest_suites)
  execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
                  WORKING_DIRECTORY "${TEST_WORKING_DIR}" TIMEOUT ${TEST_DISCOVERY_TIMEOUT}
                  OUTPUT_VARIABLE output RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "Error listing the tests of ${TEST_EXECUTABLE} (${result}):\n${output}")
  endif()
  string(REPLACE ";" "\\;" output "${output}")
  string(REPLACE "\n" ";" output "${output}")
  set(script "")
  set(suite "")
  set(suites "")
  foreach(line IN LISTS output)
    if(line MATCHES "^([^ #][^ ]*)\\.( *#.*)?$")  # a suite: "Suite." or "Prefix/Suite/0.  # TypeParam = ..."
      set(suite "${CMAKE_MATCH_1}")
    elseif(line MATCHES "^  ([^ ]+)")  # a case: "  Case" or "  Case/0  # GetParam() = ..."
      set(name "${suite}.${CMAKE_MATCH_1}")
      if(name MATCHES "Gpu|GPU")
        string(APPEND script "add_test([==[${name}]==] \"${TEST_EXECUTABLE}\" [==[--gtest_filter=${name}]==])\n"
               "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY \"${TEST_WORKING_DIR}\" "
               "LABELS gpu SKIP_REGULAR_EXPRESSION [==[${servelab_skip_regex}]==])\n")
      elseif(TEST_PER_CASE)
        string(APPEND script "add_test([==[${name}]==] \"${TEST_EXECUTABLE}\" [==[--gtest_filter=${name}]==])\n"
               "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY \"${TEST_WORKING_DIR}\" "
               "SKIP_REGULAR_EXPRESSION [==[${servelab_skip_regex}]==])\n")
      else()
        if(NOT DEFINED "cases_${suite}")
          list(APPEND suites "${suite}")
          set("cases_${suite}" 0)
        endif()
        math(EXPR "cases_${suite}" "${cases_${suite}} + 1")
      endif()
    endif()
  endforeach()
  foreach(suite IN LISTS suites)
    string(APPEND script "add_test([==[${TEST_TARGET}.${suite}]==] \"${TEST_EXECUTABLE}\" [==[--gtest_filter=${suite}.*-*Gpu*:*GPU*]==])\n"
           "set_tests_properties([==[${TEST_TARGET}.${suite}]==] PROPERTIES WORKING_DIRECTORY \"${TEST_WORKING_DIR}\" "
           "COST ${cases_${suite}} SKIP_REGULAR_EXPRESSION [==[${servelab_skip_regex}]==])\n")
  endforeach()
  file(WRITE "${CTEST_FILE}" "${script}")
endfunction()

if(NOT EXISTS "${TEST_EXECUTABLE}")
  add_test("${TEST_TARGET}_NOT_BUILT" "${TEST_TARGET}_NOT_BUILT")
else()
  if(NOT EXISTS "${CTEST_FILE}" OR NOT "${CTEST_FILE}" IS_NEWER_THAN "${TEST_EXECUTABLE}"
     OR NOT "${CTEST_FILE}" IS_NEWER_THAN "${CMAKE_CURRENT_LIST_FILE}"
     OR NOT "${CTEST_FILE}" IS_NEWER_THAN "${CMAKE_PARENT_LIST_FILE}")  # this script, the include file
    servelab_ctest_suites()
  endif()
  include("${CTEST_FILE}")
endif()
