// The physical floor for the benchmarks: the same system-call sequence as a flocklease
// acquire + release (transition lock, record read, liveness lock, atomic record write, cleanup),
// in plain C with no runtime around it. Durable (fsync of the temp file and of the directory) or
// not, as asked.
//
//   floor <dir> <cycles> <durable 0|1> [ids]   → prints one JSON line: per-cycle latencies (ns)
//   floor <dir> --contend <seconds> <durable>  → loops a waiting acquire + release on one id; prints
//                                                 cycles and each acquire's wait (run N at once)
//
// The contention floor waits the way the lease does, but in the kernel: a blocking flock on the
// transition lock, and a blocking shared flock on the holder's liveness file until it lets go.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *dir;
static int durable;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

// open + flock(LOCK_EX|LOCK_NB) + the inode re-check; -1 when busy.
static int lock_transition(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) die("open lock");
  struct stat a, b;
  if (fstat(fd, &a) != 0) die("fstat");
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) die("flock");
    close(fd);
    return -1;
  }
  if (lstat(path, &b) != 0 || a.st_ino != b.st_ino) die("lock replaced");
  return fd;
}

static void read_record(const char *path, char *buffer, size_t size) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;
    die("open record");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) die("fstat record");
  if (read(fd, buffer, size) < 0) die("read record");
  close(fd);
}

static void write_record(const char *path, const char *data) {
  char temp[4200];
  snprintf(temp, sizeof temp, "%s.%d.tmp", path, (int)getpid());
  int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) die("open temp");
  size_t length = strlen(data);
  if (write(fd, data, length) != (ssize_t)length) die("write");
  if (durable && fsync(fd) != 0) die("fsync");
  if (close(fd) != 0) die("close");
  if (rename(temp, path) != 0) die("rename");
  if (durable) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) die("fsync dir");
    close(dfd);
  }
}

// One acquire + release of `id`; 0 on success, -1 when another process held the transition lock.
static int cycle(const char *id, uint64_t token) {
  char lock[4096], record[4096], live[4096], data[512], buffer[4096];
  snprintf(lock, sizeof lock, "%s/%s.lock", dir, id);
  snprintf(record, sizeof record, "%s/%s.lease.json", dir, id);
  snprintf(live, sizeof live, "%s/%s.%llu.live", dir, id, (unsigned long long)token);

  // acquire
  int lfd = lock_transition(lock);
  if (lfd < 0) return -1;
  read_record(record, buffer, sizeof buffer);
  int live_fd = open(live, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (live_fd < 0 || flock(live_fd, LOCK_EX | LOCK_NB) != 0) die("live");
  snprintf(data, sizeof data, "{\"owner\":\"floor\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\",\"session\":\"%s\"}",
           (unsigned long long)token, id);
  write_record(record, data);
  char predecessor[4200];
  snprintf(predecessor, sizeof predecessor, "%s/%s.%llu.live", dir, id, (unsigned long long)(token - 1));
  unlink(predecessor); // usually ENOENT (released), as in the lease
  close(lfd);

  // release
  lfd = lock_transition(lock);
  if (lfd < 0) die("lock during release");
  read_record(record, buffer, sizeof buffer);
  snprintf(data, sizeof data, "{\"owner\":\"\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\",\"session\":\"%s\"}",
           (unsigned long long)token, id);
  write_record(record, data);
  unlink(live);
  close(live_fd);
  close(lfd);
  return 0;
}

// A waiting acquire + release, as the lease does it, with blocking kernel waits instead of an
// event loop: the transition lock is taken with a blocking flock; a held lease is waited out with
// a blocking shared flock on its holder's liveness file.
static void contended_cycle(uint64_t token) {
  char lock[4096], record[4096], live[4096], data[512], buffer[4096];
  snprintf(lock, sizeof lock, "%s/contended.lock", dir);
  snprintf(record, sizeof record, "%s/contended.lease.json", dir);
  snprintf(live, sizeof live, "%s/contended.%llu.live", dir, (unsigned long long)token);
  for (;;) {
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) die("lock");
    memset(buffer, 0, sizeof buffer);
    read_record(record, buffer, sizeof buffer - 1);
    char *owner = strstr(buffer, "\"owner\":\"");
    unsigned long long holder = 0;
    char *t = strstr(buffer, "\"token\":");
    if (t) holder = strtoull(t + 8, NULL, 10);
    if (owner && owner[9] != '"') {
      // held: wait (outside the transition lock) until its holder lets its liveness lock go
      char holder_live[4096];
      snprintf(holder_live, sizeof holder_live, "%s/contended.%llu.live", dir, holder);
      close(lfd);
      int hfd = open(holder_live, O_RDONLY | O_CLOEXEC);
      if (hfd >= 0) {
        flock(hfd, LOCK_SH);
        close(hfd);
      }
      continue;
    }
    int live_fd = open(live, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (live_fd < 0 || flock(live_fd, LOCK_EX | LOCK_NB) != 0) die("live");
    snprintf(data, sizeof data, "{\"owner\":\"p%d\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\"}", (int)getpid(),
             (unsigned long long)token);
    write_record(record, data);
    close(lfd);
    // release
    lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) die("lock");
    snprintf(data, sizeof data, "{\"owner\":\"\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\"}", (unsigned long long)token);
    write_record(record, data);
    unlink(live);
    close(live_fd);
    close(lfd);
    return;
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: floor <dir> <cycles> <durable> [ids] | floor <dir> --contend <seconds> <durable>\n");
    return 64;
  }
  dir = argv[1];
  if (strcmp(argv[2], "--contend") == 0) {
    durable = atoi(argv[4]);
    uint64_t until = now_ns() + (uint64_t)(atof(argv[3]) * 1e9), cycles = 0, token = (uint64_t)getpid() << 32;
    printf("{\"waitsNs\":[");
    while (now_ns() < until) {
      uint64_t start = now_ns();
      contended_cycle(++token);
      printf("%s%llu", cycles++ ? "," : "", (unsigned long long)(now_ns() - start));
    }
    printf("],\"cycles\":%llu}\n", (unsigned long long)cycles);
    return 0;
  }
  int cycles = atoi(argv[2]);
  durable = atoi(argv[3]);
  int ids = argc > 4 ? atoi(argv[4]) : 4;
  printf("{\"ns\":[");
  for (int i = 0; i < cycles; i++) {
    char id[32];
    snprintf(id, sizeof id, "id-%d", i % ids);
    uint64_t start = now_ns();
    if (cycle(id, (uint64_t)i + 1) != 0) die("uncontended cycle found the lock busy");
    printf("%s%llu", i ? "," : "", (unsigned long long)(now_ns() - start));
  }
  printf("]}\n");
  return 0;
}
