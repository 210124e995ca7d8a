# packaging.cmake — install rules for libminfer, the public headers,
# minfer.pc and the CMake package (minferConfig.cmake), and CPack DEB
# components. Included last from the top-level CMakeLists.txt so every
# install() of the tree is known here.
#
# Install components and the Debian packages they become:
#   runtime  -> minfer       libminfer.so.N, the CLI, the CPU plugin;
#                            Provides minfer-abi-N (N = MINFER_ABI_MAJOR)
#   cuda     -> minfer-cuda  the CUDA plugin (any component with "cuda" in its name);
#                            Depends on minfer-abi-N, not on one core build
#   dev      -> minfer-dev   headers, libminfer.so link, minfer.pc, CMake package
# (docs/decisions/packaging-components.md, docs/decisions/cuda-plugin-module.md)
# Plugins install their own .so (see backends/*/CMakeLists.txt) into
# ${MINFER_INSTALL_PLUGINS} (= ${libdir}/minfer/backends).

include(CMakePackageConfigHelpers)

# ---- library and headers ----
install(TARGETS minfer EXPORT minferTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/minfer
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
  FILES_MATCHING PATTERN "*.h")

# ---- pkg-config ----
# Relocatable: prefix is found from the .pc file's own directory, so an
# install into any prefix (or a DESTDIR) works without editing it.
file(RELATIVE_PATH MINFER_PC_TO_PREFIX
  "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" MINFER_PC_TO_PREFIX "${MINFER_PC_TO_PREFIX}")
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/minfer.pc @ONLY CONTENT
"prefix=\${pcfiledir}/@MINFER_PC_TO_PREFIX@
libdir=\${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=\${prefix}/@CMAKE_INSTALL_INCLUDEDIR@
plugindir=\${libdir}/minfer/backends
abi_major=1

Name: minfer
Description: C11 inference engine for GGUF language models (core library and plugin ABI)
Version: @PROJECT_VERSION@
Libs: -L\${libdir} -lminfer
Cflags: -I\${includedir}
")
# The reference (de)quantizers for plugins (static: they end up hidden
# inside the plugin that links them).
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/minfer-quant.pc @ONLY CONTENT
"prefix=\${pcfiledir}/@MINFER_PC_TO_PREFIX@
libdir=\${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=\${prefix}/@CMAKE_INSTALL_INCLUDEDIR@

Name: minfer-quant
Description: minfer's GGUF block (de)quantizers for backend plugins (static)
Version: @PROJECT_VERSION@
Libs: -L\${libdir} -lminfer-quant -lm
Cflags: -I\${includedir}
")
install(FILES ${CMAKE_BINARY_DIR}/minfer.pc ${CMAKE_BINARY_DIR}/minfer-quant.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# ---- CMake package: find_package(minfer) -> minfer::minfer, minfer::quant ----
set(MINFER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/minfer)
install(EXPORT minferTargets NAMESPACE minfer:: FILE minferTargets.cmake
  DESTINATION ${MINFER_CMAKE_DIR} COMPONENT dev)
file(WRITE ${CMAKE_BINARY_DIR}/minferConfig.cmake.in
"# minferConfig.cmake — imports minfer::minfer and minfer::quant; sets MINFER_INCLUDE_DIR and
# MINFER_PLUGIN_DIR (where backend plugins of this install live); defines
# minfer_plugin_defaults() (the settings a plugin builds with).
@PACKAGE_INIT@
include(\"\${CMAKE_CURRENT_LIST_DIR}/minferTargets.cmake\")
include(\"\${CMAKE_CURRENT_LIST_DIR}/minferPluginDefaults.cmake\")
set_and_check(MINFER_INCLUDE_DIR \"@PACKAGE_CMAKE_INSTALL_INCLUDEDIR@\")
set(MINFER_PLUGIN_DIR \"@PACKAGE_MINFER_INSTALL_PLUGINS@\")
check_required_components(minfer)
")
configure_package_config_file(${CMAKE_BINARY_DIR}/minferConfig.cmake.in
  ${CMAKE_BINARY_DIR}/minferConfig.cmake
  INSTALL_DESTINATION ${MINFER_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR MINFER_INSTALL_PLUGINS)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/minferConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/minferConfig.cmake ${CMAKE_BINARY_DIR}/minferConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/minferPluginDefaults.cmake
  DESTINATION ${MINFER_CMAKE_DIR} COMPONENT dev)

# ---- CPack: one .deb per component ----
set(CPACK_PACKAGE_NAME minfer)
set(CPACK_PACKAGE_VENDOR "minfer")
set(CPACK_PACKAGE_CONTACT "minfer maintainers <maintainers@minfer.dev>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C11 inference engine for GGUF language models")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)

# The plugin ABI major the core speaks: a plugin package depends on this
# virtual package, so any core build of the same ABI major satisfies it.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/minfer/backend.h _minfer_abi_line
     REGEX "^#define MINFER_ABI_MAJOR [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" MINFER_ABI_MAJOR_NUM "${_minfer_abi_line}")
if(NOT MINFER_ABI_MAJOR_NUM MATCHES "^[0-9]+$")
  message(FATAL_ERROR "packaging: no MINFER_ABI_MAJOR in include/minfer/backend.h")
endif()
set(MINFER_ABI_PACKAGE minfer-abi-${MINFER_ABI_MAJOR_NUM})

# The CUDA package carries the architectures of this build. A release
# package is built with MINFER_CUDA_ARCHS' default (backends/cuda/cuda-archs.cmake);
# a narrower build (CI's 90) still packages, said here and in the description.
string(REPLACE ";" ", " _minfer_cuda_archs_text "${MINFER_CUDA_ARCHS}")
if(MINFER_HAVE_CUDA AND NOT MINFER_CUDA_ARCHS STREQUAL MINFER_CUDA_ARCHS_DEFAULT)
  message(STATUS "minfer: the minfer-cuda package of this build carries only "
                 "${_minfer_cuda_archs_text} (release packages use the default "
                 "${MINFER_CUDA_ARCHS_DEFAULT})")
endif()

get_cmake_property(MINFER_ALL_COMPONENTS COMPONENTS)
set(CPACK_COMPONENTS_ALL "")
foreach(comp ${MINFER_ALL_COMPONENTS})
  string(TOUPPER "${comp}" COMP)
  string(REPLACE "-" "_" COMP "${COMP}")
  if(comp STREQUAL "runtime")
    set(CPACK_DEBIAN_${COMP}_PACKAGE_NAME minfer)
    set(CPACK_DEBIAN_${COMP}_PACKAGE_SHLIBDEPS ON)
    set(CPACK_DEBIAN_${COMP}_PACKAGE_PROVIDES ${MINFER_ABI_PACKAGE})
    set(CPACK_COMPONENT_${COMP}_DESCRIPTION
        "minfer core library, CLI and CPU backend plugin")
  elseif(comp MATCHES "cuda")
    set(CPACK_DEBIAN_${COMP}_PACKAGE_NAME minfer-cuda)
    # The CUDA runtime is linked statically: the .so needs libstdc++, libgcc_s
    # and libc (objdump -p), which dpkg-shlibdeps turns into versioned
    # Depends, plus the plugin ABI (any minfer of that major), not one exact
    # core build. The driver's libcuda.so.1 is dlopen()ed by the runtime and
    # comes from NVIDIA's packaging: suggested, since without it the plugin
    # still loads and says "no CUDA device".
    set(CPACK_DEBIAN_${COMP}_PACKAGE_SHLIBDEPS ON)
    set(CPACK_DEBIAN_${COMP}_PACKAGE_DEPENDS ${MINFER_ABI_PACKAGE})
    set(CPACK_DEBIAN_${COMP}_PACKAGE_SUGGESTS "libcuda1 | cuda-drivers")
    set(CPACK_COMPONENT_${COMP}_DESCRIPTION
        "minfer CUDA backend plugin (drop-in; removing it leaves a working CPU install)
Built for CUDA architectures ${_minfer_cuda_archs_text} (SASS for -real, PTX
otherwise); a GPU outside them is refused by the plugin with a reason.")
  elseif(comp STREQUAL "dev")
    set(CPACK_DEBIAN_${COMP}_PACKAGE_NAME minfer-dev)
    set(CPACK_COMPONENT_${COMP}_DEPENDS runtime)
    set(CPACK_DEBIAN_${COMP}_PACKAGE_DEPENDS "pkg-config")
    set(CPACK_COMPONENT_${COMP}_DESCRIPTION
        "minfer headers (application API and plugin ABI), pkg-config and CMake files")
  else()
    continue() # test-only or unknown components are not packaged
  endif()
  list(APPEND CPACK_COMPONENTS_ALL ${comp})
endforeach()
include(CPack)
