// userfaultfd as an invalidation source: registered ranges (write-protect mode, with no page
// ever write-protected, so no fault is ever delivered) report UNMAP (munmap, mmap over them,
// brk shrink, mremap shrink), REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP (mremap move)
// events, whoever makes the call, libc's internals included. A monitor thread reads them.
#pragma once
#include <cstdint>
#include <string>

namespace nicemu::udreg {

// Opens the userfaultfd and starts the monitor thread. On failure returns false and says
// why in *why (EPERM: vm.unprivileged_userfaultfd=0 without CAP_SYS_PTRACE; ENOSYS: seccomp).
bool uffd_start(std::string* why);
bool uffd_active();
// Registers the pages of [start, end) (a 2 MiB-aligned window around them when possible, so
// neighbouring registrations merge into one VMA). False if the kernel refuses this memory.
bool uffd_watch(uint64_t start, uint64_t end);
// In a fork child: the kernel gave the child no registrations and it has no monitor thread.
void uffd_forget_after_fork();

}  // namespace nicemu::udreg
