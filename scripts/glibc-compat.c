// Linked into the glibc prebuilds only (scripts/prebuild.mjs), with -Wl,--wrap for each symbol below.
//
// The build machine's glibc (2.36) binds a few calls to versions newer than 2.28, which would make the
// binary refuse to load on older distributions (RHEL 8, Debian 10, Ubuntu 18.04). Each wrapper calls
// the same function under its original version, which every later glibc still exports. Sources stay
// untouched; the prebuild's check fails if a new call needs an entry here.
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/stat.h>

#if defined(__x86_64__)
#define BASE_VERSION "GLIBC_2.2.5"
#define STAT_VER 1 // _STAT_VER_LINUX of the old <sys/stat.h>
#elif defined(__aarch64__)
#define BASE_VERSION "GLIBC_2.17"
#define STAT_VER 0
#else
#error "glibc-compat.c: no base glibc version known for this architecture"
#endif

#define HIDDEN __attribute__((visibility("hidden")))

// fstat and lstat became exported functions in 2.33; before, <sys/stat.h> inlined them as calls to these.
extern int __fxstat64(int ver, int fd, struct stat64 *st);
extern int __lxstat64(int ver, const char *path, struct stat64 *st);
__asm__(".symver __fxstat64,__fxstat64@" BASE_VERSION);
__asm__(".symver __lxstat64,__lxstat64@" BASE_VERSION);

HIDDEN int __wrap_fstat64(int fd, struct stat64 *st) { return __fxstat64(STAT_VER, fd, st); }
HIDDEN int __wrap_lstat64(const char *path, struct stat64 *st) { return __lxstat64(STAT_VER, path, st); }
// On 64-bit targets struct stat is struct stat64; aarch64 objects reference the unsuffixed names.
HIDDEN int __wrap_fstat(int fd, struct stat *st) { return __fxstat64(STAT_VER, fd, (struct stat64 *)st); }
HIDDEN int __wrap_lstat(const char *path, struct stat *st) {
  return __lxstat64(STAT_VER, path, (struct stat64 *)st);
}

// The pthread functions moved from libpthread into libc in 2.34 under a new version; the old one remains.
extern int old_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
extern int old_pthread_attr_setstacksize(pthread_attr_t *, size_t);
__asm__(".symver old_pthread_create,pthread_create@" BASE_VERSION);
__asm__(".symver old_pthread_attr_setstacksize,pthread_attr_setstacksize@" BASE_VERSION);

HIDDEN int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
  return old_pthread_create(thread, attr, start, arg);
}
HIDDEN int __wrap_pthread_attr_setstacksize(pthread_attr_t *attr, size_t size) {
  return old_pthread_attr_setstacksize(attr, size);
}
