# Warnings and sanitizers for cgpkit's own targets (not for generated or third-party code).
function(cgp_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                           -Wno-sign-conversion)
  if(CGP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # In a unity build every source is an included file, and GCC then flags a class of a public
  # header defined in a .cpp with members of that .cpp's file-local types (the pimpl Impl
  # pattern used throughout) — a warning meant for classes defined in headers, which a build of
  # one file at a time would still raise for them.
  if(CGP_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
  endif()
  # Boost 1.74 headers include deprecated Boost headers and say so on every build.
  # Boost.Geometry's integer rescaling (on by default in 1.74) overflows int64 (undefined
  # behaviour) or throws for polygons whose rings differ widely in size, whatever bound the
  # coordinates have; without it Boost validates in double arithmetic. One setting for every
  # translation unit that includes Boost.Geometry (region.md).
  target_compile_definitions(${target} PRIVATE BOOST_ALLOW_DEPRECATED_HEADERS
                                               BOOST_BIND_GLOBAL_PLACEHOLDERS
                                               BOOST_GEOMETRY_NO_ROBUSTNESS)
endfunction()

# After the build type's own -g on the command line, so it wins (CGP_FULL_DEBUG_INFO).
if(NOT CGP_FULL_DEBUG_INFO)
  add_compile_options($<$<CONFIG:Debug,RelWithDebInfo>:-g1>)
endif()

if(CGP_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# cgp_add_library(<target> [EXPORT_NAME <name>] [STATIC] [EXCLUDE_FROM_ALL] [INSTALL_HEADERS]
#                 SOURCES <file>...)
# One of cgpkit's libraries: our warnings, and the folder's include/ public both in the build
# tree and once installed. With EXPORT_NAME it is also cgpkit::<name> in the build (the alias)
# and in an installed package, in a file libcgpkit_<name>. Which export set installs it is
# CgpInstall.cmake's choice; INSTALL_HEADERS installs the folder's include/ for it.
function(cgp_add_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "STATIC;EXCLUDE_FROM_ALL;INSTALL_HEADERS" "EXPORT_NAME" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "cgp_add_library(${target}): SOURCES required; "
                        "unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(kind)
  if(arg_STATIC)
    set(kind STATIC)
  endif()
  if(arg_EXCLUDE_FROM_ALL)
    list(APPEND kind EXCLUDE_FROM_ALL)
  endif()
  add_library(${target} ${kind} ${arg_SOURCES})
  if(arg_EXPORT_NAME)
    add_library(cgpkit::${arg_EXPORT_NAME} ALIAS ${target})
    set_target_properties(${target} PROPERTIES OUTPUT_NAME cgpkit_${arg_EXPORT_NAME}
                                               EXPORT_NAME ${arg_EXPORT_NAME})
  endif()
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/include)
    target_include_directories(${target}
      PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    if(arg_INSTALL_HEADERS)
      install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
    endif()
  endif()
  cgp_target_options(${target})
endfunction()
