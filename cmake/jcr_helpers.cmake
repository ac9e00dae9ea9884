# Helpers shared by the native backends' CMakeLists (cuda/, onednn/). The top-level CMakeLists sets JCR_OPTION (the
# name of the backend's AUTO/ON/OFF cache variable) and JCR_COMPONENT (how messages name it) before each backend.

# A dependency is missing: an error under ON; under AUTO a warning and the reason (what is missing and how to fix it,
# the arguments joined) recorded for jax_cudnn_rnn/_build_info.py; the caller then returns.
function(jcr_missing)
  string(JOIN "" what ${ARGV})
  if(${JCR_OPTION} STREQUAL "ON")
    message(FATAL_ERROR "jax_cudnn_rnn: ${JCR_OPTION}=ON but ${what}")
  endif()
  message(WARNING "jax_cudnn_rnn: skipping ${JCR_COMPONENT} (${JCR_OPTION}=AUTO): ${what}. The package installs "
                  "without it and runs the pure-JAX implementation; ${JCR_OPTION}=ON makes this an error.")
  set_property(GLOBAL PROPERTY JCR_SKIP_REASON_${JCR_OPTION} "${what}")
endfunction()

# Runs a Python snippet with the build's interpreter; sets `out` to its stripped stdout, or empty on failure.
function(jcr_python_query out code)
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "${code}" OUTPUT_VARIABLE result ERROR_QUIET
                  RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT status EQUAL 0)
    set(result "")
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# The pybind11 module `jax_cudnn_rnn.<name>` exporting XLA FFI handlers, the last step of a backend's CMakeLists:
# finds the XLA FFI headers (jaxlib's include/) and pybind11 through the build's Python (a missing one goes through
# jcr_missing), then builds `SOURCES` (in the caller's folder) and common/rnn_config.cc as C++17 with -Wall -Wextra and
# `DEFINITIONS`, common/ on the include path and the FFI headers and `SYSTEM_INCLUDE_DIRS` as system headers (their
# warnings are not ours), links `LINK_LIBRARIES`, found at run time through `INSTALL_RPATH` (relative to $ORIGIN:
# where the installed module finds its library's wheel), and installs it into the package. `DESCRIPTION` says in the
# log what it is built against.
#
# The FFI headers decide which jax the module can be registered with: XLA refuses a handler whose FFI API version is
# newer than its own, and the refusal takes JAX's whole backend down. So they come from the jaxlib that the build
# requirements pin to the oldest jax the package declares (pyproject.toml), found without importing jax or jaxlib;
# the module records that jaxlib and its FFI API version (JAXLIB_BUILD_VERSION, XLA_FFI_API_BUILD_VERSION), which the
# Python loader compares with the running jaxlib's before registering anything
# (jax_cudnn_rnn/backends/native_extension.py). A --no-build-isolation build uses the environment's jaxlib instead and loads with that one or newer.
function(jcr_add_ffi_extension name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "DESCRIPTION;INSTALL_RPATH"
                        "SOURCES;SYSTEM_INCLUDE_DIRS;LINK_LIBRARIES;DEFINITIONS")
  jcr_python_query(jcr_jaxlib "import importlib.metadata as m, importlib.util as u, os; \
s = u.find_spec('jaxlib'); print(os.path.join(os.path.dirname(s.origin), 'include') + ';' + m.version('jaxlib'))")
  list(LENGTH jcr_jaxlib jcr_jaxlib_length)
  if(jcr_jaxlib_length EQUAL 2)
    list(GET jcr_jaxlib 0 jcr_ffi_include)
    list(GET jcr_jaxlib 1 jcr_jaxlib_version)
  endif()
  if(NOT jcr_jaxlib_length EQUAL 2 OR NOT EXISTS "${jcr_ffi_include}/xla/ffi/api/c_api.h")
    jcr_missing("the jaxlib of ${Python_EXECUTABLE} gave no XLA FFI headers (xla/ffi/api/c_api.h under jaxlib's "
                "include/: '${jcr_jaxlib}'); pip install jaxlib there (a --no-build-isolation build)")
    return()
  endif()
  file(STRINGS "${jcr_ffi_include}/xla/ffi/api/c_api.h" jcr_ffi_api REGEX "^#define XLA_FFI_API_(MAJOR|MINOR) ")
  string(REGEX REPLACE "#define XLA_FFI_API_MAJOR ([0-9]+);#define XLA_FFI_API_MINOR ([0-9]+)" "\\1.\\2"
                       jcr_ffi_api "${jcr_ffi_api}")
  jcr_python_query(jcr_pybind11_dir "import pybind11; print(pybind11.get_cmake_dir())")
  unset(pybind11_DIR CACHE)  # the build's Python decides, not a previous configure with another environment
  find_package(pybind11 CONFIG QUIET HINTS "${jcr_pybind11_dir}")
  if(NOT pybind11_FOUND)
    jcr_missing("pybind11 was not found for ${Python_EXECUTABLE}; pip install pybind11 there (a "
                "--no-build-isolation build)")
    return()
  endif()

  message(STATUS "jax_cudnn_rnn: building ${JCR_COMPONENT} (${arg_DESCRIPTION}; XLA FFI API ${jcr_ffi_api} from "
                 "jaxlib ${jcr_jaxlib_version}'s headers)")
  pybind11_add_module(${name} MODULE ${arg_SOURCES} "${PROJECT_SOURCE_DIR}/common/rnn_config.cc")
  target_compile_features(${name} PRIVATE cxx_std_17)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  target_compile_definitions(${name} PRIVATE ${arg_DEFINITIONS} JCR_JAXLIB_BUILD_VERSION="${jcr_jaxlib_version}")
  target_include_directories(${name} SYSTEM PRIVATE "${jcr_ffi_include}" ${arg_SYSTEM_INCLUDE_DIRS})
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}/common")
  target_link_libraries(${name} PRIVATE ${arg_LINK_LIBRARIES})
  set_target_properties(${name} PROPERTIES INSTALL_RPATH "${arg_INSTALL_RPATH}" BUILD_WITH_INSTALL_RPATH ON)
  install(TARGETS ${name} LIBRARY DESTINATION jax_cudnn_rnn)
endfunction()
