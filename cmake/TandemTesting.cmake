# tandem_add_test and the test data folder, for tests/ and the sanitizer build.
set(TANDEM_TEST_DATA_DIR ${PROJECT_SOURCE_DIR}/tests/data)

# The tests' cache folders, under the build folder.
set(TANDEM_TEST_CACHE_DIR ${PROJECT_BINARY_DIR}/test-cache)

# A test that empties the tests' cache folders, run before any test (a CTest fixture).
add_test(NAME tandem_test_cache_empty COMMAND ${CMAKE_COMMAND} -E rm -rf ${TANDEM_TEST_CACHE_DIR})
set_tests_properties(tandem_test_cache_empty PROPERTIES FIXTURES_SETUP tandem_test_cache)

# tandem_test_cache(TEST [ENVIRONMENT...]): TEST keeps what the engine measures at load (AMX
# widening, GPU speeds) in a cache folder of its own instead of the user's, emptied before
# every run of the suite so that each run measures afresh; ENVIRONMENT, more variables.
function(tandem_test_cache NAME)
  set(environment ${ARGN} XDG_CACHE_HOME=${TANDEM_TEST_CACHE_DIR}/${NAME})
  set_tests_properties(${NAME} PROPERTIES ENVIRONMENT "${environment}"
                                          FIXTURES_REQUIRED tandem_test_cache)
endfunction()

# tandem_add_test(NAME tst_x SOURCES a.cpp... LIBS lib... [SERIAL])
# SERIAL: the test measures responsiveness, so it runs alone rather than beside other tests.
function(tandem_add_test)
  cmake_parse_arguments(T "SERIAL" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE Qt6::Test ${T_LIBS})
  target_compile_definitions(${T_NAME} PRIVATE
    TANDEM_TEST_DATA_DIR="${TANDEM_TEST_DATA_DIR}"
    TANDEM_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    TANDEM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set_target_properties(${T_NAME} PROPERTIES AUTOMOC ON)
  tandem_set_warnings(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  # Widgets render offscreen; no test touches the user's real settings, data or cache folders.
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT 300)
  tandem_test_cache(${T_NAME} QT_QPA_PLATFORM=offscreen TANDEM_LOG_TO_FILE=0)
  if(T_SERIAL)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

