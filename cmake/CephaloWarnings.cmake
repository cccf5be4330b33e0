# Every project target calls cephalo_target_warnings(<target>) so the flags live in one place.
function(cephalo_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CEPHALO_WERROR}>>:-Werror>)
endfunction()
