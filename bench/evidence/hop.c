// Evidence for docs/bench.md (see there): what handing a durable record write to another thread
// costs on this machine, in C, with none of Node. The write is a renew's commit (temp file, write,
// fsync, rename, fsync of the directory). The main thread either does it itself (inline) or hands
// it to a worker thread and waits in epoll on an eventfd, as an event loop waits for libuv's pool:
//   inline         the write on the main thread
//   one worker     the same worker thread every time (a dedicated commit thread)
//   four workers   four threads waiting on one condition variable, woken in turn (libuv's pool)
// Each round runs the three modes one after another (the order rotating); the figures are each
// round's p50, and for the workers the p50 of the hand-off (main signals → worker runs) and of the
// delivery (worker done → main back from epoll_wait).
//   cc -O2 -pthread -o /tmp/hop bench/evidence/hop.c
//   /tmp/hop <dir on disk> <rounds> <writes per round> <cpu for the main thread, -1 for none>
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define MODES 3
#define MAX_ROUNDS 64
static const char *names[MODES] = {"inline", "one worker", "four workers"};

static const char *dir;
static char record[4096], temp[4096];

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void write_record(void) {
  static const char data[] = "{\"owner\":\"floor\",\"token\":12345678901,\"expiry\":\"2026-11-29T10:00:30.000Z\"}";
  int fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, data, sizeof data - 1) != (ssize_t)(sizeof data - 1) || fsync(fd) != 0) die("temp");
  close(fd);
  if (rename(temp, record) != 0) die("rename");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || fsync(dfd) != 0) die("fsync dir");
  close(dfd);
}

// A pool of `n` workers sharing one queue slot; done_fd is the main thread's eventfd.
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t ready;
  int job;
  int done_fd;
  uint64_t started, finished;
} pool_t;

static void *worker(void *arg) {
  pool_t *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->lock);
    while (!p->job) pthread_cond_wait(&p->ready, &p->lock);
    p->job = 0;
    pthread_mutex_unlock(&p->lock);
    p->started = now_ns();
    write_record();
    p->finished = now_ns();
    uint64_t one = 1;
    if (write(p->done_fd, &one, sizeof one) != sizeof one) die("eventfd");
  }
  return NULL;
}

static pool_t *pool_start(int threads, int epoll_fd) {
  pool_t *p = calloc(1, sizeof *p);
  if (!p) die("calloc");
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->ready, NULL);
  p->done_fd = eventfd(0, EFD_CLOEXEC);
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = p};
  if (p->done_fd < 0 || epoll_ctl(epoll_fd, EPOLL_CTL_ADD, p->done_fd, &e) != 0) die("epoll");
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, p) != 0) die("pthread_create");
  }
  return p;
}

static int compare(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double median_us(uint64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare);
  return (double)v[n / 2] / 1000.0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: hop <dir> <rounds> <writes per round> <main cpu or -1>\n");
    return 64;
  }
  dir = argv[1];
  int rounds = atoi(argv[2]), n = atoi(argv[3]), cpu = atoi(argv[4]);
  if (rounds < 1 || rounds > MAX_ROUNDS || n < 1) die("arguments");
  snprintf(record, sizeof record, "%s/hop.lease.json", dir);
  snprintf(temp, sizeof temp, "%s/hop.lease.json.tmp", dir);
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) die("epoll_create1");
  pool_t *pools[MODES] = {NULL, pool_start(1, epoll_fd), pool_start(4, epoll_fd)};
  if (cpu >= 0) { // after the workers are made, so that they stay free (a thread inherits its maker's)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) die("affinity");
  }
  uint64_t *total = malloc(sizeof(uint64_t) * (size_t)n), *handoff = malloc(sizeof(uint64_t) * (size_t)n),
           *delivery = malloc(sizeof(uint64_t) * (size_t)n);
  if (!total || !handoff || !delivery) die("malloc");
  double totals[MODES][MAX_ROUNDS], handoffs[MODES][MAX_ROUNDS], deliveries[MODES][MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < MODES; k++) {
      int mode = (k + r) % MODES;
      pool_t *p = pools[mode];
      for (int i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (!p) {
          write_record();
          total[i] = now_ns() - t0;
          continue;
        }
        pthread_mutex_lock(&p->lock);
        p->job = 1;
        pthread_cond_signal(&p->ready);
        pthread_mutex_unlock(&p->lock);
        struct epoll_event e;
        while (epoll_wait(epoll_fd, &e, 1, -1) != 1) {
        }
        uint64_t count;
        if (read(p->done_fd, &count, sizeof count) != sizeof count) die("eventfd read");
        uint64_t t3 = now_ns();
        total[i] = t3 - t0;
        handoff[i] = p->started - t0;
        delivery[i] = t3 - p->finished;
      }
      totals[mode][r] = median_us(total, n);
      if (p) {
        handoffs[mode][r] = median_us(handoff, n);
        deliveries[mode][r] = median_us(delivery, n);
      }
    }
  }
  for (int m = 0; m < MODES; m++) {
    printf("%-13s write, µs:", names[m]);
    for (int r = 0; r < rounds; r++) printf(" %5.0f", totals[m][r]);
    if (m > 0) {
      printf("   hand-off:");
      for (int r = 0; r < rounds; r++) printf(" %3.0f", handoffs[m][r]);
      printf("   delivery:");
      for (int r = 0; r < rounds; r++) printf(" %3.0f", deliveries[m][r]);
    }
    printf("\n");
  }
  return 0;
}
