# AR_SANITIZE=address -> ASan + UBSan; AR_SANITIZE=thread -> TSan. Applied to every target.
if(AR_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(AR_SANITIZE STREQUAL "thread")
  # BLAS always runs single-threaded inside our pool (core/context.h), so TSan sees every thread.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT AR_SANITIZE STREQUAL "")
  message(FATAL_ERROR "AR_SANITIZE must be '', 'address' or 'thread' (got '${AR_SANITIZE}')")
endif()
