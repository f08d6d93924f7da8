# AR_FUZZ=ON: instrument every project library for libFuzzer (coverage only, no main) with ASan and
# UBSan; fuzz/ then links each target with -fsanitize=fuzzer. Requires clang. Without AR_FUZZ the
# same target sources are linked with a plain replay driver and ctest replays their corpora.
if(AR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "AR_FUZZ=ON needs clang (configure with CC=clang CXX=clang++)")
  endif()
  if(NOT AR_SANITIZE STREQUAL "")
    message(FATAL_ERROR "AR_FUZZ=ON already enables ASan+UBSan; leave AR_SANITIZE empty")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined -g)
  add_link_options(-fsanitize=address,undefined)
endif()
