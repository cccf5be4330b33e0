# Sanitizer builds, each in a build folder of its own (scripts/test uses build-asan; the fuzz
# harnesses use build-fuzz):
#   CEPHALO_SANITIZE=ON  AddressSanitizer + UndefinedBehaviorSanitizer on every target; any
#                        report aborts the process, so a ctest run fails on it.
#   CEPHALO_FUZZ=ON      clang only: also libFuzzer coverage instrumentation (tests/fuzz/).
# Included before any target is defined, so the flags reach every library.
if(CEPHALO_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CEPHALO_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++); found "
                        "${CMAKE_CXX_COMPILER_ID}")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  set(CEPHALO_SANITIZE ON)
endif()
if(CEPHALO_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=address,undefined)
endif()
