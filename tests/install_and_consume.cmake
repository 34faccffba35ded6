# ctest script: install the build into a scratch prefix, then configure, build and run a small
# consumer project against it with find_package(cgpkit), and check cgpkit-client.pc.
foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

set(flags "${CXX_FLAGS}")
if(SANITIZE)
  set(flags "${flags} -fsanitize=address,undefined")
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} "-DCMAKE_CXX_FLAGS=${flags}"
    "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(NOT last_output MATCHES "cgpkit consumer ok")
  message(FATAL_ERROR "consumer printed: ${last_output}")
endif()

# pkg-config file for C users of the device ABI.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB pc_file ${prefix}/lib*/pkgconfig/cgpkit-client.pc ${prefix}/lib/*/pkgconfig/cgpkit-client.pc)
if(NOT pc_file)
  message(FATAL_ERROR "cgpkit-client.pc was not installed under ${prefix}")
endif()
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
run(${PKG_CONFIG} --validate cgpkit-client)
run(${PKG_CONFIG} --libs --cflags cgpkit-client)
if(NOT last_output MATCHES "-lcgpkit_client")
  message(FATAL_ERROR "unexpected pkg-config output: ${last_output}")
endif()
run(${PKG_CONFIG} --variable=includedir cgpkit-client)
string(STRIP "${last_output}" includedir)
if(NOT EXISTS "${includedir}/cgp/common/error.hpp")
  message(FATAL_ERROR "pkg-config includedir ${includedir} does not hold cgpkit's headers")
endif()
# The C ABI test, compiled as a C user would: cc test.c $(pkg-config --cflags --libs ...).
run(${PKG_CONFIG} --cflags --libs cgpkit-client)
string(STRIP "${last_output}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
set(c_flags -std=c11)
if(SANITIZE)
  list(APPEND c_flags -fsanitize=address,undefined)
endif()
run(${C_COMPILER} ${c_flags} ${C_ABI_TEST} -o ${WORK_DIR}/c_abi_test ${pc_flags})
run(${WORK_DIR}/c_abi_test)
if(NOT last_output MATCHES " 0 failed")
  message(FATAL_ERROR "installed C ABI test: ${last_output}")
endif()

# The device link, where installed (cgpkit-link.pc): the C check-in example compiled as a C app
# would, `cc app.c $(pkg-config --cflags --libs cgpkit-link)`, then run against an address where
# nothing listens: it must dial (gRPC linked and working) and report unavailable by name.
file(GLOB link_pc ${pc_dir}/cgpkit-link.pc)
if(link_pc AND DEFINED LINK_EXAMPLE)
  run(${PKG_CONFIG} --validate cgpkit-link)
  run(${PKG_CONFIG} --cflags --libs cgpkit-link)
  string(STRIP "${last_output}" link_flags)
  separate_arguments(link_flags UNIX_COMMAND "${link_flags}")
  run(${C_COMPILER} ${c_flags} ${LINK_EXAMPLE} -o ${WORK_DIR}/check_in_device ${link_flags})
  file(WRITE ${WORK_DIR}/credential "secret\n")
  file(WRITE ${WORK_DIR}/root.pem "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
  execute_process(COMMAND ${WORK_DIR}/check_in_device 127.0.0.1:1 phone-0 ${WORK_DIR}/credential
                          ${WORK_DIR}/root.pem ${WORK_DIR}/ledger.db -73.97 40.75
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "unavailable")
    message(FATAL_ERROR "installed check-in example: exit ${rc}\n${out}\n${err}")
  endif()
endif()
message(STATUS "install_and_consume: ok")
