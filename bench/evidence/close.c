// What the last close of an unlinked, flocked liveness file costs the closing process on its own,
// with nobody waiting on it: the work a releaser's waking close does after the lock is dropped.
// Each sample: create, flock, fsync (a durable commit's), unlink, sleep 2 ms, then time the close.
//   cc -O2 -o /tmp/close bench/evidence/close.c && /tmp/close /tmp 200
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 3 || atoi(argv[2]) < 1) {
    fprintf(stderr, "usage: close <dir> <samples>\n");
    return 2;
  }
  int n = atoi(argv[2]);
  double *taken = malloc(n * sizeof *taken);
  char path[4096];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/close-probe.%d.live", argv[1], i);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || fsync(fd) != 0 || unlink(path) != 0) {
      perror(path);
      return 1;
    }
    usleep(2000);
    double before = now_us();
    close(fd);
    taken[i] = now_us() - before;
  }
  qsort(taken, n, sizeof *taken, by_value);
  printf("last close of an unlinked flocked file, %d samples: p50 %.1f µs, p99 %.1f µs\n", n, taken[n / 2],
         taken[n * 99 / 100]);
  return 0;
}
