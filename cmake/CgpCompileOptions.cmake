# Warnings and sanitizers for cgpkit's own targets (not for generated or third-party code).
function(cgp_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                           -Wno-sign-conversion)
  if(CGP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
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

if(CGP_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
