# minferPluginDefaults.cmake — part of the SDK's CMake package (installed
# beside minferConfig.cmake, which includes it). minfer_plugin_defaults()
# gives a plugin built against an installed minfer what the top-level build
# gives the in-tree plugins: C11, hidden symbols, warnings, _GNU_SOURCE, an
# optimised default build type, the build-tree output dir and the install
# dir of plugins (MINFER_OUT_PLUGINS, MINFER_INSTALL_PLUGINS). A macro, so
# the settings land in the caller's scope. backends/cpu and backends/cuda
# call it when they build standalone.
macro(minfer_plugin_defaults)
  include(GNUInstallDirs)
  set(CMAKE_C_STANDARD 11)
  set(CMAKE_C_STANDARD_REQUIRED ON)
  set(CMAKE_C_EXTENSIONS OFF)
  set(CMAKE_C_VISIBILITY_PRESET hidden)
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "" FORCE)
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-Wall> $<$<COMPILE_LANGUAGE:C>:-Wextra>
                      $<$<COMPILE_LANGUAGE:C>:-Wno-unused-parameter>)
  add_compile_definitions(_GNU_SOURCE)
  set(MINFER_OUT_PLUGINS ${CMAKE_CURRENT_BINARY_DIR})
  set(MINFER_INSTALL_PLUGINS ${CMAKE_INSTALL_LIBDIR}/minfer/backends)
endmacro()
