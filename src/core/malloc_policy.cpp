#include "core/malloc_policy.h"

#include <malloc.h>

namespace ar {

void set_process_malloc_policy() {
  mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
}

void return_free_heap_pages() { malloc_trim(0); }

}  // namespace ar
