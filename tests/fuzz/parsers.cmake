# The parser harnesses: fuzz_<name> from tests/fuzz/<name>_fuzz.cc. Included by the root
# CMakeLists when SERVELAB_FUZZ=ON. The small ones compile just the parser's sources (a fuzz build
# instruments everything it compiles, which is slow); the scenario and report harnesses link the
# (instrumented) libraries their parsers call into.
set(model_parser_srcs engine/model/config.cpp engine/model/dtype.cpp engine/model/hf_config.cpp
    engine/model/safetensors.cpp engine/model/tensors.cpp)
list(TRANSFORM model_parser_srcs PREPEND ${CMAKE_SOURCE_DIR}/)
function(servelab_parser_fuzzer name)
  add_executable(fuzz_${name} ${CMAKE_SOURCE_DIR}/tests/fuzz/${name}_fuzz.cc ${ARGN})
  target_include_directories(fuzz_${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
endfunction()
add_library(fuzz_model_parsers OBJECT ${model_parser_srcs})
target_include_directories(fuzz_model_parsers PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(fuzz_model_parsers PUBLIC nlohmann_json::nlohmann_json Threads::Threads)
servelab_parser_fuzzer(hf_config)
servelab_parser_fuzzer(safetensors)
# dataset.cpp counts lengths with a Tokenizer when given one: tokenizer_bytes.cpp holds its vtable.
servelab_parser_fuzzer(dataset ${CMAKE_SOURCE_DIR}/loadgen/dataset.cpp ${CMAKE_SOURCE_DIR}/engine/model/tokenizer_bytes.cpp
                       ${CMAKE_SOURCE_DIR}/engine/model/tokenizer_unicode.cpp ${CMAKE_SOURCE_DIR}/engine/model/unicode_tables.cpp)
servelab_parser_fuzzer(scenario)
servelab_parser_fuzzer(report)
target_link_libraries(fuzz_hf_config PRIVATE fuzz_model_parsers)
target_link_libraries(fuzz_safetensors PRIVATE fuzz_model_parsers)
target_link_libraries(fuzz_dataset PRIVATE nlohmann_json::nlohmann_json)
target_link_libraries(fuzz_scenario PRIVATE servelab_loadgen)
target_link_libraries(fuzz_report PRIVATE servelab_analysis)
# The server's request-body parser and the HTTP driver's SSE / OpenAI chunk reader.
servelab_parser_fuzzer(request_parse ${CMAKE_SOURCE_DIR}/server/request_parse.cpp)
servelab_parser_fuzzer(stream_chunk ${CMAKE_SOURCE_DIR}/loadgen/http/sse_parser.cpp
                       ${CMAKE_SOURCE_DIR}/loadgen/http/openai_chunk.cpp)
target_link_libraries(fuzz_request_parse PRIVATE nlohmann_json::nlohmann_json)
target_link_libraries(fuzz_stream_chunk PRIVATE nlohmann_json::nlohmann_json)
# The grammar engine's front ends (JSON Schema, regex, GBNF, request constraints) and its matcher.
file(GLOB grammar_srcs ${CMAKE_SOURCE_DIR}/engine/grammar/*.cpp)
# tokenizer_bytes.cpp holds the Tokenizer vtable the harness's small tokenizer needs.
servelab_parser_fuzzer(grammar ${grammar_srcs} ${CMAKE_SOURCE_DIR}/engine/model/tokenizer_bytes.cpp
                       ${CMAKE_SOURCE_DIR}/engine/model/tokenizer_unicode.cpp ${CMAKE_SOURCE_DIR}/engine/model/unicode_tables.cpp)
target_link_libraries(fuzz_grammar PRIVATE nlohmann_json::nlohmann_json Threads::Threads)
# The report's checkers of regex / choice / GBNF outputs (plain C++, no library).
servelab_parser_fuzzer(constraint_check ${CMAKE_SOURCE_DIR}/analysis/constraint_check.cpp
                       ${CMAKE_SOURCE_DIR}/analysis/gbnf_check.cpp)
