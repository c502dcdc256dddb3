// How long this machine takes to wake a sleeping process when a lock is let go, with no Node in
// the picture: a holder closes its flocked file after 30 ms; one waiter is blocked in flock on it,
// another in epoll_wait on an inotify watch of it (IN_CLOSE_WRITE). Fresh processes each sample,
// as a waiting lease is asleep; CLOCK_MONOTONIC from the close to each waiter running again.
//   cc -O2 -o /tmp/wake bench/evidence/wake.c && /tmp/wake /dev/shm/wake.test 40
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

static int by_value(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

static void report(long long t, int fd) {
  if (write(fd, &t, sizeof t) != sizeof t) _exit(1);
  _exit(0);
}

int main(int argc, char **argv) {
  if (argc < 3) return 64;
  const char *path = argv[1];
  int n = atoi(argv[2]);
  long long *flocked = calloc(n, sizeof *flocked), *notified = calloc(n, sizeof *notified);
  int to_flocked[2], to_notified[2];
  if (!flocked || !notified || pipe(to_flocked) || pipe(to_notified)) return 1;
  for (int i = 0; i < n; i++) {
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || flock(fd, LOCK_EX)) return 1;
    if (fork() == 0) { // blocked in flock
      close(fd);
      int own = open(path, O_RDONLY);
      flock(own, LOCK_SH);
      report(now_us(), to_flocked[1]);
    }
    if (fork() == 0) { // asleep in epoll_wait on an inotify watch
      close(fd);
      int in = inotify_init1(0), own = open(path, O_RDONLY);
      char self[64];
      snprintf(self, sizeof self, "/proc/self/fd/%d", own);
      inotify_add_watch(in, self, IN_CLOSE_WRITE);
      int ep = epoll_create1(0);
      struct epoll_event event = {.events = EPOLLIN};
      epoll_ctl(ep, EPOLL_CTL_ADD, in, &event);
      epoll_wait(ep, &event, 1, -1);
      report(now_us(), to_notified[1]);
    }
    usleep(30000);
    long long closed = now_us(), a, b;
    close(fd);
    if (read(to_flocked[0], &a, sizeof a) != sizeof a || read(to_notified[0], &b, sizeof b) != sizeof b) return 1;
    flocked[i] = a - closed;
    notified[i] = b - closed;
    while (wait(NULL) > 0) {}
  }
  qsort(flocked, n, sizeof *flocked, by_value);
  qsort(notified, n, sizeof *notified, by_value);
  printf("woken from flock: p50 %lld µs, p90 %lld µs; from epoll on inotify: p50 %lld µs, p90 %lld µs (n %d)\n",
         flocked[n / 2], flocked[n * 9 / 10], notified[n / 2], notified[n * 9 / 10], n);
  unlink(path);
  return 0;
}
