# tandem_add_test and the test data folder, for tests/ and the sanitizer build.
set(TANDEM_TEST_DATA_DIR ${PROJECT_SOURCE_DIR}/tests/data)

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
  # Widgets render offscreen; no test touches the user's real settings or data folders.
  set_tests_properties(${T_NAME} PROPERTIES
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;TANDEM_LOG_TO_FILE=0"
    TIMEOUT 300)
  if(T_SERIAL)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

