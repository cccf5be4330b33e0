# A test suite that cannot be registered because a tool is missing must not vanish quietly:
# in CI (environment CI=true) that fails configuration; elsewhere it is a loud CMake warning
# naming the suite, the missing tool and how to install it, and the suite's name goes to
# <build>/unavailable_suites.txt, which makes the label-count check (tests/label_counts.py)
# skip loudly instead of passing.
file(REMOVE ${CMAKE_BINARY_DIR}/unavailable_suites.txt)
function(cephalo_suite_unavailable suite reason)
  if("$ENV{CI}" STREQUAL "true")
    message(FATAL_ERROR "test suite ${suite} cannot be registered: ${reason} (CI=true: every "
                        "suite must run; scripts/setup installs the tools)")
  endif()
  message(WARNING "SKIPPED TEST SUITE ${suite}: ${reason} (scripts/setup installs it; with "
                  "CI=true this fails configuration)")
  file(APPEND ${CMAKE_BINARY_DIR}/unavailable_suites.txt "${suite}\n")
endfunction()

# The system python3 that imports PyTorch (Debian's python3-torch: the suites that use PyTorch
# as a reference or to write profiler traces), in `out_var`; empty, with the suite registered
# unavailable naming what is missing, when there is none.
function(cephalo_torch_python suite out_var)
  set(${out_var} "" PARENT_SCOPE)
  find_program(CEPHALO_TORCH_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT CEPHALO_TORCH_PYTHON)
    cephalo_suite_unavailable(${suite} "no /usr/bin/python3")
    return()
  endif()
  execute_process(COMMAND ${CEPHALO_TORCH_PYTHON} -c "import torch.profiler"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    cephalo_suite_unavailable(${suite} "PyTorch is not importable by ${CEPHALO_TORCH_PYTHON} "
                                       "(apt-get install python3-torch)")
    return()
  endif()
  set(${out_var} ${CEPHALO_TORCH_PYTHON} PARENT_SCOPE)
endfunction()
