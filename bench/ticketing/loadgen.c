/*
 * One load generator for both lock servers, so that the benchmark compares servers, not client
 * libraries (issue 13). One thread, raw epoll; per ready connection one read(), every complete
 * reply handled, and all the requests they trigger sent in one write(). The loop is the same for
 * Ticketing and Redis; only the request/reply codec differs.
 *
 *   loadgen ticketing|ticketing-keep|redis PORT CONNS INFLIGHT distinct|hot WARMUP_MS DURATION_MS
 *           BACKOFF_US SERVER_PID PREFIX
 *
 * Every connection carries INFLIGHT independent lock loops ("slots"): acquire, then release as
 * soon as the grant is seen, then acquire again. A cycle runs from the first acquire request of
 * a slot to its release's reply.
 * - Ticketing: `A key owner 60000` / `R key token`; replies matched by owner (A/T/B) and token
 *   (R/N), as the protocol says (never by position). `ticketing-keep`: the same with a keep
 *   between them, `A` / `K key token` / `R`, the K's reply (K/G) matched by token.
 * - Redis: `SET key value NX PX 30000`, then `EVALSHA <compare-and-delete> 1 key value`; replies
 *   come in order per connection. A failed SET (the key is held) is retried at once
 *   (BACKOFF_US 0) or after BACKOFF_US.
 * With LOADGEN_SECRET in the environment (never in argv), each Ticketing connection sends
 * `H <secret>` first (a server with a secret, or an access-control identity's).
 * Prints one JSON object: cycles/s, p50/p99 cycle latency, server CPU (utime/stime of
 * /proc/SERVER_PID/stat, all threads) and this process's CPU over the measured window, and the
 * system-call counts of the loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP (256 * 1024)
#define OUT_CAP (256 * 1024)
#define MAX_SLOTS 4096
#define SUB 64
#define BUCKETS (SUB * 40)
#define LEASE_MS 30000

enum proto { TICKETING, REDIS };
enum phase { ACQUIRING, KEEPING, RELEASING, BACKING_OFF };

struct slot {
  int conn;
  int phase;
  uint64_t started_ns; /* first acquire of this cycle */
  uint64_t retry_at_ns;
  char key[64];
  int key_len;
  char owner[32]; /* Ticketing: owner; Redis: the SET value (unique per cycle) */
  int owner_len;
  char token[24];
  int token_len;
};

struct conn {
  int fd;
  char *in;
  size_t in_len;
  char *out;
  size_t out_len;
  int want_out; /* EPOLLOUT armed: the last write was partial */
  /* Redis: the slots of the requests in flight, in order (replies come back in order). */
  int *fifo;
  size_t fifo_head, fifo_len, fifo_cap;
  int first_slot;
};

static enum proto proto;
static int keep; /* ticketing-keep: A, K, R per cycle */
static int hot;
static uint64_t backoff_ns;
static struct conn *conns;
static struct slot *slots;
static int nconns, inflight;
static char sha[41];
static unsigned long seq;

static int measuring;
static uint64_t cycles, failed_acquires, failures, reads, writes, waits, backing_off;
static uint32_t hist[BUCKETS];

static void die(const char *what) {
  fprintf(stderr, "loadgen: %s: %s\n", what, strerror(errno));
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Log-linear histogram of microseconds, 64 sub-buckets per power of two (< 1.6 % error). */
static int bucket_of(double us) {
  if (us < SUB) return us < 0 ? 0 : (int)us;
  int exp = (int)floor(log2(us / SUB));
  double base = SUB * ldexp(1, exp);
  int b = SUB + exp * SUB + (int)((us - base) / ldexp(1, exp));
  return b >= BUCKETS ? BUCKETS - 1 : b;
}
static double value_of(int b) {
  if (b < SUB) return b + 1;
  int exp = (b - SUB) / SUB, offset = (b - SUB) % SUB;
  return SUB * ldexp(1, exp) + (offset + 1) * ldexp(1, exp);
}
static double percentile_us(double q) {
  uint64_t rank = (uint64_t)ceil((double)cycles * q), seen = 0;
  for (int b = 0; b < BUCKETS; b++) {
    seen += hist[b];
    if (seen >= rank && rank > 0) return value_of(b);
  }
  return NAN;
}

static void put(struct conn *c, const char *s, size_t n) {
  if (c->out_len + n > OUT_CAP) {
    fprintf(stderr, "loadgen: output buffer full\n");
    exit(1);
  }
  memcpy(c->out + c->out_len, s, n);
  c->out_len += n;
}

static void fifo_push(struct conn *c, int slot) {
  if (c->fifo_len == c->fifo_cap) {
    fprintf(stderr, "loadgen: fifo full\n");
    exit(1);
  }
  c->fifo[(c->fifo_head + c->fifo_len++) % c->fifo_cap] = slot;
}
static int fifo_pop(struct conn *c) {
  if (c->fifo_len == 0) {
    fprintf(stderr, "loadgen: reply with nothing in flight\n");
    exit(1);
  }
  int s = c->fifo[c->fifo_head];
  c->fifo_head = (c->fifo_head + 1) % c->fifo_cap;
  c->fifo_len--;
  return s;
}

#define PUT_LITERAL(c, s) put((c), (s), sizeof(s) - 1)

/* RESP bulk string. */
static void put_bulk(struct conn *c, const char *s, int n) {
  char head[32];
  int h = snprintf(head, sizeof head, "$%d\r\n", n);
  put(c, head, (size_t)h);
  put(c, s, (size_t)n);
  put(c, "\r\n", 2);
}

static void send_acquire(int si) {
  struct slot *s = &slots[si];
  struct conn *c = &conns[s->conn];
  s->phase = ACQUIRING;
  if (proto == TICKETING) {
    char line[160];
    int n = snprintf(line, sizeof line, "A %.*s %.*s 60000\n", s->key_len, s->key, s->owner_len, s->owner);
    put(c, line, (size_t)n);
  } else {
    PUT_LITERAL(c, "*6\r\n$3\r\nSET\r\n");
    put_bulk(c, s->key, s->key_len);
    put_bulk(c, s->owner, s->owner_len);
    PUT_LITERAL(c, "$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n");
    fifo_push(c, si);
  }
}

static void new_cycle(int si, uint64_t now) {
  struct slot *s = &slots[si];
  s->started_ns = now;
  if (proto == REDIS) s->owner_len = snprintf(s->owner, sizeof s->owner, "v%d-%lu", si, ++seq);
  send_acquire(si);
}

static void send_release(int si) {
  struct slot *s = &slots[si];
  struct conn *c = &conns[s->conn];
  s->phase = RELEASING;
  if (proto == TICKETING) {
    char line[128];
    int n = snprintf(line, sizeof line, "R %.*s %.*s\n", s->key_len, s->key, s->token_len, s->token);
    put(c, line, (size_t)n);
  } else {
    PUT_LITERAL(c, "*5\r\n$7\r\nEVALSHA\r\n$40\r\n");
    put(c, sha, 40);
    PUT_LITERAL(c, "\r\n$1\r\n1\r\n");
    put_bulk(c, s->key, s->key_len);
    put_bulk(c, s->owner, s->owner_len);
    fifo_push(c, si);
  }
}

static void send_keep(int si) {
  struct slot *s = &slots[si];
  struct conn *c = &conns[s->conn];
  s->phase = KEEPING;
  char line[128];
  int n = snprintf(line, sizeof line, "K %.*s %.*s\n", s->key_len, s->key, s->token_len, s->token);
  put(c, line, (size_t)n);
}

static void cycle_done(int si, uint64_t now) {
  if (measuring) {
    cycles++;
    hist[bucket_of((double)(now - slots[si].started_ns) / 1000.0)]++;
  }
  new_cycle(si, now);
}

static void acquire_failed(int si, uint64_t now) {
  if (measuring) failed_acquires++;
  if (backoff_ns == 0) {
    send_acquire(si);
  } else {
    slots[si].phase = BACKING_OFF;
    slots[si].retry_at_ns = now + backoff_ns;
    backing_off++;
  }
}

/* Ticketing: find this connection's slot by owner (A/T/B) or by token (R/N). */
static int slot_by_owner(struct conn *c, const char *owner, size_t n) {
  for (int i = 0; i < inflight; i++) {
    struct slot *s = &slots[c->first_slot + i];
    if ((size_t)s->owner_len == n && memcmp(s->owner, owner, n) == 0) return c->first_slot + i;
  }
  return -1;
}
static int slot_by_token(struct conn *c, int phase, const char *token, size_t n) {
  for (int i = 0; i < inflight; i++) {
    struct slot *s = &slots[c->first_slot + i];
    if (s->phase == phase && (size_t)s->token_len == n && memcmp(s->token, token, n) == 0) return c->first_slot + i;
  }
  return -1;
}

static void bad_reply(const char *line, size_t n) {
  fprintf(stderr, "loadgen: unexpected reply: %.*s\n", (int)(n > 200 ? 200 : n), line);
  exit(1);
}

/* Handles one Ticketing reply line (without '\n'). */
static void ticketing_reply(struct conn *c, const char *line, size_t n, uint64_t now) {
  const char *f1 = memchr(line, ' ', n);
  if (f1 == NULL || f1 != line + 1) bad_reply(line, n);
  const char *end = line + n;
  const char *a = f1 + 1;
  const char *sp = memchr(a, ' ', (size_t)(end - a));
  if (sp == NULL) bad_reply(line, n);
  switch (line[0]) {
    case 'A': { /* A token owner key */
      const char *owner = sp + 1;
      const char *sp2 = memchr(owner, ' ', (size_t)(end - owner));
      if (sp2 == NULL) bad_reply(line, n);
      int si = slot_by_owner(c, owner, (size_t)(sp2 - owner));
      if (si < 0 || slots[si].phase != ACQUIRING || (size_t)(sp - a) >= sizeof slots[si].token) bad_reply(line, n);
      slots[si].token_len = (int)(sp - a);
      memcpy(slots[si].token, a, (size_t)(sp - a));
      if (keep) send_keep(si);
      else send_release(si);
      return;
    }
    case 'T':
    case 'B': { /* T owner key: counted as a failure (waits are 60 s), tried again */
      int si = slot_by_owner(c, a, (size_t)(sp - a));
      if (si < 0) bad_reply(line, n);
      failures++;
      send_acquire(si);
      return;
    }
    case 'R':
    case 'N': { /* R token key */
      int si = slot_by_token(c, RELEASING, a, (size_t)(sp - a));
      if (si < 0) bad_reply(line, n);
      if (line[0] == 'N') failures++;
      cycle_done(si, now);
      return;
    }
    case 'K':
    case 'G': { /* K token key lease_ms; G token key: a keep is answered, release */
      int si = slot_by_token(c, KEEPING, a, (size_t)(sp - a));
      if (si < 0) bad_reply(line, n);
      if (line[0] == 'G') failures++;
      send_release(si);
      return;
    }
    default:
      bad_reply(line, n);
  }
}

/* Handles the complete replies in c->in; returns how many bytes they used. */
static size_t handle_replies(struct conn *c, uint64_t now) {
  char *buf = c->in;
  size_t len = c->in_len, pos = 0;
  for (;;) {
    char *nl = memchr(buf + pos, '\n', len - pos);
    if (nl == NULL) break;
    size_t lineEnd = (size_t)(nl - buf);
    if (proto == TICKETING) {
      ticketing_reply(c, buf + pos, lineEnd - pos, now);
    } else {
      /* Every reply here is one line: +OK, $-1 (nil), :0/:1, or -ERR. */
      const char *line = buf + pos;
      int si = fifo_pop(c);
      struct slot *s = &slots[si];
      if (s->phase == ACQUIRING) {
        if (line[0] == '+') send_release(si);
        else if (line[0] == '$' && line[1] == '-') acquire_failed(si, now);
        else bad_reply(line, lineEnd - pos);
      } else {
        if (line[0] == ':') {
          if (line[1] != '1') failures++;
          cycle_done(si, now);
        } else {
          bad_reply(line, lineEnd - pos);
        }
      }
    }
    pos = lineEnd + 1;
  }
  return pos;
}

static void flush_out(struct conn *c, int ep) {
  if (c->out_len == 0 || c->want_out) return;
  ssize_t w = write(c->fd, c->out, c->out_len);
  if (measuring) writes++;
  if (w < 0) {
    if (errno != EAGAIN) die("write");
    w = 0;
  }
  memmove(c->out, c->out + w, c->out_len - (size_t)w);
  c->out_len -= (size_t)w;
  if (c->out_len > 0) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)(c - conns)};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
    c->want_out = 1;
  }
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Blocking request/reply for set-up (SCRIPT LOAD). */
static void redis_script_load(int fd) {
  static const char script[] =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
  char req[512];
  int n = snprintf(req, sizeof req, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%zu\r\n%s\r\n", strlen(script), script);
  if (write(fd, req, (size_t)n) != n) die("write SCRIPT LOAD");
  char reply[256];
  size_t got = 0;
  while (got < 47) { /* $40\r\n<sha>\r\n */
    ssize_t r = read(fd, reply + got, sizeof reply - got);
    if (r <= 0) die("read SCRIPT LOAD");
    got += (size_t)r;
  }
  if (reply[0] != '$') bad_reply(reply, got);
  memcpy(sha, reply + 5, 40);
}

struct cpu {
  double user_s, sys_s;
};
static struct cpu server_cpu(int pid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) die("open /proc/<pid>/stat");
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* Fields after the command name (which may contain spaces): state is field 3, utime 14, stime 15. */
  char *p = strrchr(buf, ')');
  unsigned long utime = 0, stime = 0;
  if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) {
    fprintf(stderr, "loadgen: cannot parse /proc/%d/stat\n", pid);
    exit(1);
  }
  double tick = (double)sysconf(_SC_CLK_TCK);
  return (struct cpu){utime / tick, stime / tick};
}
static struct cpu own_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (struct cpu){ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6};
}

int main(int argc, char **argv) {
  if (argc != 11) {
    fprintf(stderr,
            "usage: loadgen ticketing|ticketing-keep|redis PORT CONNS INFLIGHT distinct|hot WARMUP_MS DURATION_MS BACKOFF_US "
            "SERVER_PID PREFIX\n");
    return 2;
  }
  proto = strcmp(argv[1], "redis") == 0 ? REDIS : TICKETING;
  keep = strcmp(argv[1], "ticketing-keep") == 0;
  int port = atoi(argv[2]);
  nconns = atoi(argv[3]);
  inflight = atoi(argv[4]);
  hot = strcmp(argv[5], "hot") == 0;
  uint64_t warmup_ns = strtoull(argv[6], NULL, 10) * 1000000u;
  uint64_t duration_ns = strtoull(argv[7], NULL, 10) * 1000000u;
  backoff_ns = strtoull(argv[8], NULL, 10) * 1000u;
  int server_pid = atoi(argv[9]);
  const char *prefix = argv[10];
  if (nconns < 1 || inflight < 1 || nconns * inflight > MAX_SLOTS || strlen(prefix) > 24) {
    fprintf(stderr, "loadgen: bad counts or prefix\n");
    return 2;
  }

  conns = calloc((size_t)nconns, sizeof *conns);
  slots = calloc((size_t)(nconns * inflight), sizeof *slots);
  int ep = epoll_create1(0);
  if (ep < 0) die("epoll_create1");
  for (int i = 0; i < nconns; i++) {
    struct conn *c = &conns[i];
    c->fd = connect_to(port);
    const char *secret = getenv("LOADGEN_SECRET");
    if (proto == TICKETING && secret != NULL) {
      char hello[300];
      int n = snprintf(hello, sizeof hello, "H %s\n", secret);
      if (n >= (int)sizeof hello || write(c->fd, hello, (size_t)n) != n) die("write H");
    }
    if (proto == REDIS && i == 0) redis_script_load(c->fd);
    c->in = malloc(IN_CAP);
    c->out = malloc(OUT_CAP);
    c->fifo_cap = (size_t)inflight * 2 + 4;
    c->fifo = malloc(c->fifo_cap * sizeof *c->fifo);
    c->first_slot = i * inflight;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
  }
  uint64_t start = now_ns();
  for (int si = 0; si < nconns * inflight; si++) {
    struct slot *s = &slots[si];
    s->conn = si / inflight;
    s->key_len = hot ? snprintf(s->key, sizeof s->key, "%s:hot", prefix) : snprintf(s->key, sizeof s->key, "%s:k%d", prefix, si);
    s->owner_len = snprintf(s->owner, sizeof s->owner, "o%d", si);
    new_cycle(si, start);
  }
  for (int i = 0; i < nconns; i++) flush_out(&conns[i], ep);

  struct epoll_event events[256];
  uint64_t measure_at = start + warmup_ns, end_at = measure_at + duration_ns, measured_from = 0;
  struct cpu server0 = {0, 0}, own0 = {0, 0};
  for (;;) {
    uint64_t now = now_ns();
    if (!measuring && now >= measure_at && measured_from == 0) {
      measuring = 1;
      measured_from = now;
      server0 = server_cpu(server_pid);
      own0 = own_cpu();
    }
    if (now >= end_at) break;
    int timeout_ms = (int)((end_at - now) / 1000000u) + 1;
    if (!measuring && (int)((measure_at - now) / 1000000u) + 1 < timeout_ms) timeout_ms = (int)((measure_at - now) / 1000000u) + 1;
    if (backing_off > 0) {
      uint64_t soonest = UINT64_MAX;
      for (int si = 0; si < nconns * inflight; si++) {
        if (slots[si].phase == BACKING_OFF && slots[si].retry_at_ns < soonest) soonest = slots[si].retry_at_ns;
      }
      int ms = soonest <= now ? 0 : (int)((soonest - now + 999999u) / 1000000u);
      if (ms < timeout_ms) timeout_ms = ms;
    }
    int n = epoll_wait(ep, events, 256, timeout_ms);
    if (measuring) waits++;
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    now = now_ns();
    for (int e = 0; e < n; e++) {
      struct conn *c = &conns[events[e].data.u32];
      if (events[e].events & EPOLLOUT) {
        c->want_out = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = events[e].data.u32};
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
      }
      if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        ssize_t r = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
        if (measuring) reads++;
        if (r == 0) {
          fprintf(stderr, "loadgen: the server closed a connection\n");
          return 1;
        }
        if (r < 0) {
          if (errno != EAGAIN && errno != EINTR) die("read");
        } else {
          c->in_len += (size_t)r;
          size_t used = handle_replies(c, now);
          memmove(c->in, c->in + used, c->in_len - used);
          c->in_len -= used;
        }
      }
      flush_out(c, ep);
    }
    if (backing_off > 0) {
      for (int si = 0; si < nconns * inflight; si++) {
        if (slots[si].phase == BACKING_OFF && slots[si].retry_at_ns <= now) {
          backing_off--;
          send_acquire(si);
        }
      }
      for (int i = 0; i < nconns; i++) flush_out(&conns[i], ep);
    }
  }
  uint64_t measured_to = now_ns();
  struct cpu server1 = server_cpu(server_pid), own1 = own_cpu();
  double seconds = (double)(measured_to - measured_from) / 1e9;
  if (cycles == 0) {
    fprintf(stderr, "loadgen: no cycle completed in the measured window\n");
    return 1;
  }
  double per = cycles > 0 ? 1e6 / (double)cycles : NAN; /* µs per cycle from seconds */
  printf("{\"cycles\":%llu,\"seconds\":%.6f,\"cyclesPerSecond\":%.1f,\"p50Us\":%.1f,\"p99Us\":%.1f,\"p999Us\":%.1f,"
         "\"serverUserUsPerCycle\":%.3f,\"serverSysUsPerCycle\":%.3f,\"clientUserUsPerCycle\":%.3f,"
         "\"clientSysUsPerCycle\":%.3f,\"serverCpuShare\":%.3f,\"clientCpuShare\":%.3f,\"failedAcquiresPerCycle\":%.3f,"
         "\"failures\":%llu,\"readsPerCycle\":%.4f,\"writesPerCycle\":%.4f,\"waitsPerCycle\":%.4f}\n",
         (unsigned long long)cycles, seconds, (double)cycles / seconds, percentile_us(0.5), percentile_us(0.99),
         percentile_us(0.999), (server1.user_s - server0.user_s) * per, (server1.sys_s - server0.sys_s) * per,
         (own1.user_s - own0.user_s) * per, (own1.sys_s - own0.sys_s) * per,
         (server1.user_s + server1.sys_s - server0.user_s - server0.sys_s) / seconds,
         (own1.user_s + own1.sys_s - own0.user_s - own0.sys_s) / seconds,
         cycles > 0 ? (double)failed_acquires / (double)cycles : NAN, (unsigned long long)failures,
         (double)reads / (double)cycles, (double)writes / (double)cycles, (double)waits / (double)cycles);
  return failures > 0 ? 3 : 0;
}
