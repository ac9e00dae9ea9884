# Helpers shared by the native backends' CMakeLists (cuda/, onednn/). The top-level CMakeLists sets JCR_OPTION (the
# name of the backend's AUTO/ON/OFF cache variable) and JCR_COMPONENT (how messages name it) before each backend.

# A dependency is missing: an error under ON; under AUTO a warning, the reason (what is missing and how to fix it, the
# arguments joined) recorded for jax_cudnn_rnn/_build_info.py, and JCR_SKIP set in the caller's scope (the caller then
# returns).
function(jcr_missing)
  string(JOIN "" what ${ARGV})
  if(${JCR_OPTION} STREQUAL "ON")
    message(FATAL_ERROR "jax_cudnn_rnn: ${JCR_OPTION}=ON but ${what}")
  endif()
  message(WARNING "jax_cudnn_rnn: skipping ${JCR_COMPONENT} (${JCR_OPTION}=AUTO): ${what}. The package installs "
                  "without it and runs the pure-JAX implementation; ${JCR_OPTION}=ON makes this an error.")
  set_property(GLOBAL PROPERTY JCR_SKIP_REASON_${JCR_OPTION} "${what}")
  set(JCR_SKIP TRUE PARENT_SCOPE)
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

# The XLA FFI headers (jax.ffi.include_dir(), into jcr_ffi_include) and pybind11, both through the build's Python; a
# missing one goes through jcr_missing (the caller returns when JCR_SKIP is set). A macro: pybind11's package
# variables must land in the caller's scope.
macro(jcr_find_ffi_and_pybind11)
  jcr_python_query(jcr_ffi_include "import jax; print(jax.ffi.include_dir())")
  if(NOT jcr_ffi_include OR NOT EXISTS "${jcr_ffi_include}/xla/ffi/api/ffi.h")
    jcr_missing("jax.ffi.include_dir() of ${Python_EXECUTABLE} gave no xla/ffi/api/ffi.h ('${jcr_ffi_include}'); "
                "pip install jax there (a --no-build-isolation build)")
  else()
    jcr_python_query(jcr_pybind11_dir "import pybind11; print(pybind11.get_cmake_dir())")
    unset(pybind11_DIR CACHE)  # the build's Python decides, not a previous configure with another environment
    find_package(pybind11 CONFIG QUIET HINTS "${jcr_pybind11_dir}")
    if(NOT pybind11_FOUND)
      jcr_missing("pybind11 was not found for ${Python_EXECUTABLE}; pip install pybind11 there (a "
                  "--no-build-isolation build)")
    endif()
  endif()
endmacro()
