# Installs the libraries, the CMake package cgpkit (components and targets common, client, link
# with CGP_DEVICE_LINK — and, unless CGP_CLIENT_ONLY, coordinator and simulation) and the
# pkg-config files cgpkit-client.pc and cgpkit-link.pc for C users of the device ABI.
include(CMakePackageConfigHelpers)

# Installs the targets after `set` as that export set (cgpkit::<EXPORT_NAME> in the package).
function(cgp_install_export_set set)
  install(TARGETS ${ARGN}
          EXPORT ${set}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT ${set} NAMESPACE cgpkit:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cgpkit)
endfunction()

# Export sets, so that a client-only install (CGP_CLIENT_ONLY) is a complete package:
# find_package(cgpkit COMPONENTS client) finds cgpkit::common and cgpkit::client in either.
cgp_install_export_set(cgpkitClientTargets cgp_common cgp_client)
# The device link (cgpkit::link, cgp/cgp_link.h) in a set of its own: it adds gRPC, which a
# client-only app that speaks the protocol itself does not need.
if(CGP_DEVICE_LINK)
  cgp_install_export_set(cgpkitLinkTargets cgp_protocol cgp_device_link)
endif()
if(NOT CGP_CLIENT_ONLY)
  cgp_install_export_set(cgpkitTargets cgp_coordinator cgp_simulation)
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/cgpkitConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cgpkitConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cgpkit)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cgpkitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cgpkitConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cgpkitConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cgpkit)

# Static libraries need their C++ dependencies on a C program's link line; shared ones do not.
if(BUILD_SHARED_LIBS)
  set(CGP_PC_REQUIRES "")
  set(CGP_PC_REQUIRES_PRIVATE "protobuf libsodium sqlite3")
  set(CGP_PC_LIBS_EXTRA "")
  set(CGP_PC_LIBS_PRIVATE "-lstdc++ -lm")
else()
  set(CGP_PC_REQUIRES "protobuf libsodium sqlite3")
  set(CGP_PC_REQUIRES_PRIVATE "")
  set(CGP_PC_LIBS_EXTRA "-lstdc++ -lm")
  set(CGP_PC_LIBS_PRIVATE "")
endif()
# Relocatable: the prefix is found from the .pc file's own place (pkg-config's ${pcfiledir}),
# so `cmake --install --prefix DIR` works wherever DIR is.
file(RELATIVE_PATH CGP_PC_RELATIVE_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/cgpkit-client.pc.in
               ${CMAKE_CURRENT_BINARY_DIR}/cgpkit-client.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cgpkit-client.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(CGP_DEVICE_LINK)
  if(BUILD_SHARED_LIBS)
    set(CGP_PC_LINK_REQUIRES "cgpkit-client")
    set(CGP_PC_LINK_REQUIRES_PRIVATE "grpc++ libssl")
  else()
    set(CGP_PC_LINK_REQUIRES "cgpkit-client grpc++ libssl")
    set(CGP_PC_LINK_REQUIRES_PRIVATE "")
  endif()
  configure_file(${CMAKE_CURRENT_LIST_DIR}/cgpkit-link.pc.in
                 ${CMAKE_CURRENT_BINARY_DIR}/cgpkit-link.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cgpkit-link.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
