#pragma once
// Large tensors and payloads (100 MB per step for a 25M-float model) are malloc'ed with
// mmap, and every fresh mapping costs a page fault per 4 KiB on first touch: about half of
// the server's CPU in the transport benchmark. With transparent huge pages in "madvise"
// mode, glibc (2.35+) advises its mmap'ed chunks as huge when the tunable
// glibc.malloc.hugetlb=1 is set, which cuts those faults 512-fold. It also sets
// glibc.malloc.arena_max=1: with an arena per thread, the multi-MiB buffers gRPC allocates
// on one thread and frees on another are given back and faulted in again every step (the
// likely cause; measured, transport bench at 25M
// floats: 1 arena moves codec none 30-40% faster both ways and lowers the server's peak RSS
// from 805-851 to 605-629 MiB). Tunables are read at process start, so this re-executes the
// program once with the tunables added.
//
//   int main(int argc, char** argv) { gradpress::UseHugePagesForLargeBuffers(argv); ... }
//
// No-op when GRADPRESS_NO_HUGEPAGES is set or both tunables are already set; hugetlb is left
// out when the kernel's THP mode is not "madvise". Call first thing in main, before any
// thread starts.
namespace gradpress {

void UseHugePagesForLargeBuffers(char** argv);

}  // namespace gradpress
