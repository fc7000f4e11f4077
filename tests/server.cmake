# `dsv4 serve`: the unit tests of the server layer (request parsing, the pre-handler checks, constrained output,
# the Anthropic / Responses writers, scoring through the completions handler) link the server library, and the
# end-to-end test drives a real server with the official openai npm client and raw HTTP (tests/server/*.test.mjs, run by `node --test`). Fixtures: a
# tiny random-weight model with the real DeepSeek vocabulary, and the npm packages installed in a build-dir copy
# of tests/server. The Node tests start the server themselves on a free loopback port (--port 0) and stop it
# with a signal.
foreach(_t test_openai_request test_server_constrained test_server_constrained_slow test_http_guard test_server_agent_apis
           test_server_scoring test_server_speculative)
  if(TARGET ${_t})
    target_link_libraries(${_t} PRIVATE dsv4_server)
  endif()
endforeach()

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
