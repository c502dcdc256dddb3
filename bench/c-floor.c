// The physical floor for the benchmarks: the same system-call sequence as a flocklease
// acquire + release (transition lock, record read, liveness lock, atomic record write, cleanup),
// in plain C with no runtime around it. Durable (fsync of the temp file and of the directory) or
// not, as asked.
//
//   c-floor <dir> <cycles> <durable 0|1> [ids]   → prints one JSON line: per-cycle latencies (ns)
//   c-floor <dir> --renew <renews> <durable>     → acquires one id, renews it <renews> times (prints
//                                                 each renew's latency in ns), then releases it
//   c-floor <dir> --contend <seconds> <durable> [warmup seconds]
//                                              → loops a waiting acquire + release on one id; prints
//                                                 cycles and each acquire's wait (call to lease held;
//                                                 run N at once); the
//                                                 cycles of the first [warmup] seconds are not counted
//   c-floor <dir> --contend-fair <seconds> <durable> [warmup seconds]
//                                              → the same, first come first served (see fair_cycle)
//   c-floor <dir> --handoff <cycles> <durable> <hold ms>
//                                              → fair cycles that hold the lease <hold ms> each; prints
//                                                 the CLOCK_MONOTONIC times (ns) of each acquire and
//                                                 each release returning: run 2 at once, and a release
//                                                 of one → the next acquire of the other is a C hand-off
//                                                 (the release commits the record naming the next in
//                                                 line, as the lease's does; the acquirer reads it)
//   c-floor <file> --hold                        → flocks <file> exclusively, prints "held", sleeps
//   c-floor <file> --wait-unlock                 → prints "waiting", blocks in a shared flock of <file>
//                                                 until nobody holds it exclusively; once its stdin
//                                                 closes, prints the CLOCK_MONOTONIC time (ns) it got
//                                                 it: the kernel's floor for noticing that a (killed)
//                                                 holder is gone
//
// The uncontended sequence matches the lease's call for call, as strace shows it (bench/syscalls.mjs
// compares them): the record is read with one read of a 4 KiB buffer (a short read is its end), the
// transition lock's content (the wait queue) is read with a pread before the write side of an
// acquire or a release, a new liveness file is fstat-ed before it is flocked, and a release lets go
// of the transition lock before it unlocks and closes its liveness file.
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
// --handoff: as the lease's release does, the releaser commits the record naming the next in line
// before waking it, and the woken acquirer only reads it (no write of its own).
static int release_commits;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pause_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (ns && nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
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
  ssize_t got = read(fd, buffer, size);
  if (got < 0) die("read record");
  if ((size_t)got == size) die("record too big"); // a short read is its end, as the lease reads it
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

// The lease reads the transition lock's content (its wait queue) before it writes: a pread.
static void peek_queue(int lfd) {
  char queue[4096];
  ssize_t got = pread(lfd, queue, sizeof queue, 0);
  if (got < 0) die("pread lock");
  if (got != 0) {
    fprintf(stderr, "a wait queue in an uncontended run\n");
    exit(1);
  }
}

// Creates and exclusively flocks a liveness file (open, fstat, flock), as the lease does.
static int lock_live(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) die("live");
  return fd;
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
  peek_queue(lfd);
  int live_fd = lock_live(live);
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
  peek_queue(lfd);
  snprintf(data, sizeof data, "{\"owner\":\"\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\",\"session\":\"%s\"}",
           (unsigned long long)token, id);
  write_record(record, data);
  unlink(live);
  close(lfd);
  flock(live_fd, LOCK_UN);
  close(live_fd);
  return 0;
}

// One renew of a lease this process holds: the transition lock, the record read, the record
// rewritten with a fresh expiry (same token), as the lease's renew does it.
static void renew(const char *id, uint64_t token) {
  char lock[4096], record[4096], data[512], buffer[4096];
  snprintf(lock, sizeof lock, "%s/%s.lock", dir, id);
  snprintf(record, sizeof record, "%s/%s.lease.json", dir, id);
  int lfd = lock_transition(lock);
  if (lfd < 0) die("lock during renew");
  read_record(record, buffer, sizeof buffer);
  snprintf(data, sizeof data, "{\"owner\":\"floor\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:30.000Z\",\"session\":\"%s\"}",
           (unsigned long long)token, id);
  write_record(record, data);
  close(lfd);
}

// The contention floors' transition lock: a blocking flock, as a waiting process takes it.
static int wait_transition(const char *lock) {
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX) != 0) die("lock");
  return fd;
}

// The contention floors' record: held by this process under `token`, or (held = 0) released.
static void write_contended_record(const char *record, int held, uint64_t token) {
  char data[512];
  if (held)
    snprintf(data, sizeof data, "{\"owner\":\"p%d\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\"}", (int)getpid(),
             (unsigned long long)token);
  else
    snprintf(data, sizeof data, "{\"owner\":\"\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\"}", (unsigned long long)token);
  write_record(record, data);
}

// A waiting acquire + release, as the lease does it, with blocking kernel waits instead of an
// event loop: the transition lock is taken with a blocking flock; a held lease is waited out with
// a blocking shared flock on its holder's liveness file. Returns when it had the lease (the
// acquire's end: record written, transition lock let go), before the release.
static uint64_t contended_cycle(uint64_t token) {
  char lock[4096], record[4096], live[4096], buffer[4096];
  snprintf(lock, sizeof lock, "%s/contended.lock", dir);
  snprintf(record, sizeof record, "%s/contended.lease.json", dir);
  snprintf(live, sizeof live, "%s/contended.%llu.live", dir, (unsigned long long)token);
  for (;;) {
    int lfd = wait_transition(lock);
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
    write_contended_record(record, 1, token);
    close(lfd);
    uint64_t acquired = now_ns();
    // release
    lfd = wait_transition(lock);
    write_contended_record(record, 0, token);
    unlink(live);
    close(live_fd);
    close(lfd);
    return acquired;
  }
}

// A FAIR waiting acquire + release: first come, first served, as the lease's queue serves its
// waiters. A ticket counter lives in the transition lock file; each waiter creates and flocks its
// own ticket file, then blocks in a shared flock on the ticket file of the waiter just ahead, which
// that waiter lets go of when it releases (so every hand-off wakes exactly the next process, as a
// lease release wakes the front waiter). Acquire and release then write the record as above.
// Not a lease (no crash handling of waiters): the physical floor of a fair hand-off.
static uint64_t fair_cycle(uint64_t token, uint64_t hold_ns, uint64_t *released) {
  char lock[4096], record[4096], mine[4096], ahead[4096], buffer[4096];
  snprintf(lock, sizeof lock, "%s/fair.lock", dir);
  snprintf(record, sizeof record, "%s/fair.lease.json", dir);
  int lfd = wait_transition(lock);
  uint64_t tail = 0;
  if (pread(lfd, &tail, sizeof tail, 0) < 0) die("pread");
  uint64_t ticket = tail + 1;
  if (pwrite(lfd, &ticket, sizeof ticket, 0) != sizeof ticket) die("pwrite");
  snprintf(mine, sizeof mine, "%s/fair.%llu.wait", dir, (unsigned long long)ticket);
  int mfd = open(mine, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (mfd < 0 || flock(mfd, LOCK_EX | LOCK_NB) != 0) die("ticket");
  close(lfd);
  if (ticket > 1) {
    snprintf(ahead, sizeof ahead, "%s/fair.%llu.wait", dir, (unsigned long long)(ticket - 1));
    int afd = open(ahead, O_RDONLY | O_CLOEXEC);
    if (afd >= 0) { // gone already: the one ahead has released
      flock(afd, LOCK_SH);
      close(afd);
    }
  }
  lfd = wait_transition(lock);
  read_record(record, buffer, sizeof buffer);
  if (!release_commits) write_contended_record(record, 1, token);
  close(lfd);
  uint64_t acquired = now_ns();
  pause_ns(hold_ns);
  lfd = wait_transition(lock);
  write_contended_record(record, release_commits, token + 1); // a hand-off commit, or a tombstone
  unlink(mine);
  // Timed as it lets go, before the close that wakes the next in line: the woken process may run
  // on this CPU first, and a stamp after the close would then wait for it.
  if (released) *released = now_ns();
  close(mfd);
  close(lfd);
  return acquired;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[2], "--hold") == 0) {
    int fd = open(argv[1], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) die("hold");
    printf("held\n");
    fflush(stdout);
    for (;;) pause();
  }
  if (argc == 3 && strcmp(argv[2], "--wait-unlock") == 0) {
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open");
    printf("waiting\n");
    fflush(stdout);
    if (flock(fd, LOCK_SH) != 0) die("flock");
    uint64_t unlocked = now_ns();
    // Quiet until asked (stdin closed): a line or an exit now would wake the parent just as the
    // process being measured needs the CPU.
    char drain[64];
    while (read(0, drain, sizeof drain) > 0) continue;
    printf("{\"unlockedNs\":%llu}\n", (unsigned long long)unlocked);
    return 0;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: c-floor <dir> <cycles> <durable> [ids] | c-floor <dir> --renew <renews> <durable> | c-floor <dir> --contend[-fair] <seconds> <durable> [warmup]\n");
    return 64;
  }
  dir = argv[1];
  if (strcmp(argv[2], "--contend") == 0 || strcmp(argv[2], "--contend-fair") == 0) {
    int fair = strcmp(argv[2], "--contend-fair") == 0;
    durable = atoi(argv[4]);
    uint64_t warm = now_ns() + (uint64_t)((argc > 5 ? atof(argv[5]) : 0) * 1e9);
    uint64_t until = warm + (uint64_t)(atof(argv[3]) * 1e9), cycles = 0, token = (uint64_t)getpid() << 32;
    printf("{\"waitsNs\":[");
    for (uint64_t start = now_ns(); start < until; start = now_ns()) {
      uint64_t acquired = fair ? fair_cycle(++token, 0, NULL) : contended_cycle(++token);
      if (start < warm) continue;
      printf("%s%llu", cycles++ ? "," : "", (unsigned long long)(acquired - start));
    }
    printf("],\"cycles\":%llu}\n", (unsigned long long)cycles);
    return 0;
  }
  if (strcmp(argv[2], "--handoff") == 0 && argc > 5) {
    int cycles = atoi(argv[3]);
    durable = atoi(argv[4]);
    release_commits = 1;
    uint64_t hold_ns = (uint64_t)(atof(argv[5]) * 1e6), token = (uint64_t)getpid() << 32;
    uint64_t quiet_ns = argc > 6 ? (uint64_t)(atof(argv[6]) * 1e6) : 0;
    uint64_t *acquired = calloc((size_t)cycles, sizeof *acquired), *released = calloc((size_t)cycles, sizeof *released);
    if (!acquired || !released) die("calloc");
    for (int i = 0; i < cycles; i++) {
      acquired[i] = fair_cycle(++token, hold_ns, &released[i]);
      pause_ns(quiet_ns); // idle after letting go, as the Lease's holder is: see takeover.mjs
    }
    printf("{\"acquiredNs\":[");
    for (int i = 0; i < cycles; i++) printf("%s%llu", i ? "," : "", (unsigned long long)acquired[i]);
    printf("],\"releasedNs\":[");
    for (int i = 0; i < cycles; i++) printf("%s%llu", i ? "," : "", (unsigned long long)released[i]);
    printf("]}\n");
    return 0;
  }
  if (strcmp(argv[2], "--renew") == 0) {
    int renews = atoi(argv[3]);
    durable = atoi(argv[4]);
    // Take the lease (a plain acquire: the release half is left for the end).
    char lock[4096], live[4096], record[4096], data[512], buffer[4096];
    uint64_t token = (uint64_t)getpid();
    snprintf(lock, sizeof lock, "%s/renewed.lock", dir);
    snprintf(record, sizeof record, "%s/renewed.lease.json", dir);
    snprintf(live, sizeof live, "%s/renewed.%llu.live", dir, (unsigned long long)token);
    int lfd = lock_transition(lock);
    if (lfd < 0) die("lock");
    read_record(record, buffer, sizeof buffer);
    int live_fd = lock_live(live);
    snprintf(data, sizeof data, "{\"owner\":\"floor\",\"token\":%llu,\"expiry\":\"2026-11-29T10:00:00.000Z\",\"session\":\"renewed\"}",
             (unsigned long long)token);
    write_record(record, data);
    close(lfd);
    printf("{\"ns\":[");
    for (int i = 0; i < renews; i++) {
      uint64_t start = now_ns();
      renew("renewed", token);
      printf("%s%llu", i ? "," : "", (unsigned long long)(now_ns() - start));
    }
    printf("]}\n");
    unlink(record);
    unlink(live);
    unlink(lock);
    close(live_fd);
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
