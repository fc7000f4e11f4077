# `dsv4 serve`: the unit tests of the OpenAI layer (tests/test_openai_request.cpp) and of the pre-handler checks
# (tests/test_http_guard.cpp) link the HTTP-free server sources, and the end-to-end test drives a real server
# with the official openai npm client and raw HTTP (tests/server/*.test.mjs, run by `node --test`). Fixtures: a
# tiny random-weight model with the real DeepSeek vocabulary, and the npm packages installed in a build-dir copy
# of tests/server. The Node tests start the server themselves on a free loopback port (--port 0) and stop it
# with a signal.
if(TARGET test_openai_request)
  target_sources(test_openai_request PRIVATE
    ${CMAKE_SOURCE_DIR}/src/server/openai_request.cpp
    ${CMAKE_SOURCE_DIR}/src/server/output_constraint.cpp
    ${CMAKE_SOURCE_DIR}/src/server/openai_response.cpp
    ${CMAKE_SOURCE_DIR}/src/server/metrics.cpp)
endif()
# Constrained decoding through the chat request path (request parsing, the output grammar, the engine); the
# 1,000-completion run is labelled slow.
foreach(_t test_server_constrained test_server_constrained_slow)
  if(TARGET ${_t})
    target_sources(${_t} PRIVATE
      ${CMAKE_SOURCE_DIR}/src/server/openai_request.cpp
      ${CMAKE_SOURCE_DIR}/src/server/anthropic_request.cpp
      ${CMAKE_SOURCE_DIR}/src/server/responses_request.cpp
      ${CMAKE_SOURCE_DIR}/src/server/output_constraint.cpp)
  endif()
endforeach()
if(TARGET test_http_guard)
  target_sources(test_http_guard PRIVATE
    ${CMAKE_SOURCE_DIR}/src/server/http_head.cpp
    ${CMAKE_SOURCE_DIR}/src/server/http_guard.cpp)
endif()

# The Anthropic / Responses layers' unit test links the whole server layer but no listener: httplib only for
# the handler code it does not call.
if(TARGET test_server_agent_apis)
  file(GLOB _server_sources ${CMAKE_SOURCE_DIR}/src/server/*.cpp)
  list(FILTER _server_sources EXCLUDE REGEX "/(server|chat_page)\\.cpp$")
  target_sources(test_server_agent_apis PRIVATE ${_server_sources})
  target_link_libraries(test_server_agent_apis PRIVATE PkgConfig::HTTPLIB)
endif()
# Prompt scoring (echo + logprobs, max_tokens 0) drives the completions handler without a listener.
if(TARGET test_server_scoring)
  file(GLOB _server_sources ${CMAKE_SOURCE_DIR}/src/server/*.cpp)
  list(FILTER _server_sources EXCLUDE REGEX "/(server|chat_page)\\.cpp$")
  target_sources(test_server_scoring PRIVATE ${_server_sources})
  target_link_libraries(test_server_scoring PRIVATE PkgConfig::HTTPLIB)
endif()

set(DSV4_SERVER_VOCAB ${DSV4_SHARED_DIR}/fixtures/tokenizer/deepseek_v3/vocab.gguf)
find_program(DSV4_NODE NAMES node)
find_program(DSV4_NPM NAMES npm)
if(NOT DSV4_MINIMAL AND EXISTS ${DSV4_SERVER_VOCAB} AND DSV4_NODE AND DSV4_NPM)
  set(_dir ${CMAKE_BINARY_DIR}/server_e2e)
  file(MAKE_DIRECTORY ${_dir})
  add_test(NAME server_e2e_model COMMAND ${CMAKE_BINARY_DIR}/bin/dsv4 synth --preset tiny --vocab ${DSV4_SERVER_VOCAB}
    -q -o ${_dir}/tiny.gguf)
  add_test(NAME server_e2e_client COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/server -DDST=${_dir}/client
    -DNPM=${DSV4_NPM} -P ${CMAKE_CURRENT_SOURCE_DIR}/server/setup_client.cmake)
  set_tests_properties(server_e2e_model server_e2e_client PROPERTIES FIXTURES_SETUP server_e2e TIMEOUT 600
    LABELS "server")
  # One test file at a time: each starts its own server, and the machine may have only two cores.
  add_test(NAME server_e2e COMMAND ${DSV4_NODE} --test --test-concurrency=1 --test-reporter=spec
    ${_dir}/client/api.test.mjs ${_dir}/client/limits.test.mjs ${_dir}/client/hostile.test.mjs
    ${_dir}/client/agent_apis.test.mjs ${_dir}/client/constrained.test.mjs ${_dir}/client/chat_page.test.mjs)
  set_tests_properties(server_e2e PROPERTIES FIXTURES_REQUIRED server_e2e TIMEOUT 900 LABELS "server"
    RUN_SERIAL TRUE
    ENVIRONMENT "DSV4_BIN=${CMAKE_BINARY_DIR}/bin/dsv4;DSV4_MODEL=${_dir}/tiny.gguf")
endif()
