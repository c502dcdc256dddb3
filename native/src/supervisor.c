// flocklease-supervisor: sits between `flocklease run` and its command so that the command's
// whole process group dies with `run`, even when `run` is SIGKILLed.
//
//   flocklease-supervisor --parent-pid <pid> [--keep-fd <fd>] [--foreground] -- <command> [args...]
//
// Group mode (default): the supervisor leads a new session and process group (run spawns it
// detached, which already makes it one) and runs the command in that group. `run` signals the
// whole group, so the command receives forwarded signals directly; the supervisor only absorbs its
// own copy. --foreground: the supervisor and the command stay in run's process group (the
// terminal's); the supervisor forwards to the command the signals a process sends it, and ignores
// the terminal's (those reached the command already).
//
// When the parent dies (PR_SET_PDEATHSIG), the supervisor SIGKILLs every other process of its
// group (--foreground: the command only), reaps them (it is a child subreaper, so orphaned
// descendants come back to it), and only then exits. --keep-fd names an inherited descriptor of the
// lease generation's `.live` file: flock locks belong to the open file description, so while the
// supervisor keeps it open the lease stays held and no waiter can start its own command. The
// command does not inherit it (close-on-exec).
//
// Exit status: the command's, or 128+n if signal n killed it; 126/127 if it could not be run;
// 70 (EX_SOFTWARE) if the supervisor itself failed; 64 on a usage error.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 64
#define EXIT_SOFTWARE 70
// How long to wait for the killed group to be gone before giving up (a process stuck in
// uninterruptible sleep). Bounded so that the supervisor never hangs.
#define REAP_LIMIT_MS 10000

static const int FORWARDED[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof FORWARDED / sizeof FORWARDED[0])

static void usage(void) {
  fputs("usage: flocklease-supervisor --parent-pid <pid> [--keep-fd <fd>] [--foreground] -- <command> [args...]\n"
        "(started by `flocklease run`; not meant to be run by hand)\n",
        stderr);
  exit(EXIT_USAGE);
}

static void fail(const char *what) {
  fprintf(stderr, "flocklease-supervisor: %s: %s\n", what, strerror(errno));
  exit(EXIT_SOFTWARE);
}

static long parse_number(const char *text) {
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0) usage();
  return value;
}

static int death_signal(void) { return SIGRTMIN; }

static long now_ms(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) fail("clock_gettime");
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

// Reaps every exited child without blocking; records the command's status when it is among them.
static void reap(pid_t command, int *command_status, int *command_done) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) return;
    if (pid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) return;
      fail("waitpid");
    }
    if (pid == command) {
      *command_status = status;
      *command_done = 1;
    }
  }
}

// A failure while ending the command: reported once, and the caller tries again until its
// deadline. Exiting at once, as fail() does, would close the kept `.live` (release the lease)
// while the command's processes may still be alive.
static int retry_after(const char *what) {
  static int reported;
  if (!reported) fprintf(stderr, "flocklease-supervisor: %s: %s (trying again)\n", what, strerror(errno));
  reported = 1;
  return -1;
}

// SIGKILLs every process of process group `group` other than this one; returns how many exist
// (zombies included: they are gone once reaped), or -1 when the scan failed (some may be left).
static int kill_group_members(pid_t group) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) return retry_after("opendir /proc");
  pid_t self = getpid();
  int members = 0, failed = 0;
  for (;;) {
    // readdir reports an error only through errno, and the calls below may leave one there (a
    // process that exited meanwhile: ESRCH), so errno is cleared right before each readdir.
    errno = 0;
    struct dirent *entry = readdir(proc);
    if (entry == NULL) break;
    char *end;
    long pid = strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    pid_t pgid = getpgid((pid_t)pid);
    if (pgid < 0) continue; // exited meanwhile (ESRCH)
    if (pgid != group) continue;
    members++;
    if (kill((pid_t)pid, SIGKILL) != 0 && errno != ESRCH) failed = retry_after("kill");
  }
  if (errno != 0) failed = retry_after("readdir /proc");
  closedir(proc); // read-only: a failing close loses nothing
  return failed ? -1 : members;
}

// The parent died: kill what we supervise, wait (bounded) until it is gone, then exit — closing
// the kept `.live` descriptor last. A failing kill or scan is retried until the deadline.
static void on_parent_death(int foreground, pid_t command, int command_done) {
  int status = 0, done = command_done;
  long deadline = now_ms() + REAP_LIMIT_MS;
  for (;;) {
    int left; // processes still there; -1: not known (the kill or the scan failed)
    if (foreground) {
      left = !done;
      if (!done && kill(command, SIGKILL) != 0 && errno != ESRCH) left = retry_after("kill");
    } else {
      left = kill_group_members(getpgrp());
    }
    reap(command, &status, &done);
    if (left == 0) break;
    if (now_ms() > deadline) {
      if (left < 0) {
        fprintf(stderr, "flocklease-supervisor: could not make sure the command's processes were gone within %d ms\n",
                REAP_LIMIT_MS);
      } else {
        fprintf(stderr, "flocklease-supervisor: %d process(es) of the command survived SIGKILL for %d ms\n", left,
                REAP_LIMIT_MS);
      }
      break;
    }
    struct timespec pause = {0, 2 * 1000 * 1000};
    if (nanosleep(&pause, NULL) != 0 && errno != EINTR) fail("nanosleep");
  }
  _exit(128 + SIGKILL);
}

int main(int argc, char **argv) {
  pid_t parent = -1;
  int keep_fd = -1, foreground = 0, i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (strcmp(argv[i], "--parent-pid") == 0 && i + 1 < argc) parent = (pid_t)parse_number(argv[++i]);
    else if (strcmp(argv[i], "--keep-fd") == 0 && i + 1 < argc) keep_fd = (int)parse_number(argv[++i]);
    else if (strcmp(argv[i], "--foreground") == 0) foreground = 1;
    else usage();
  }
  if (parent <= 0 || i >= argc) usage();
  char **command_argv = argv + i;

  // Everything we wait for arrives as a signal: block them, then take them with sigwaitinfo.
  sigset_t waited, original;
  if (sigemptyset(&waited) != 0 || sigaddset(&waited, SIGCHLD) != 0 || sigaddset(&waited, death_signal()) != 0) {
    fail("sigaddset");
  }
  for (size_t s = 0; s < NFORWARDED; s++) {
    if (sigaddset(&waited, FORWARDED[s]) != 0) fail("sigaddset");
  }
  if (sigprocmask(SIG_BLOCK, &waited, &original) != 0) fail("sigprocmask");

  if (prctl(PR_SET_PDEATHSIG, death_signal()) != 0) fail("prctl(PR_SET_PDEATHSIG)");
  // The parent may have died before the prctl: then we were reparented already and no signal comes.
  if (getppid() != parent) return 128 + SIGKILL;
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) fail("prctl(PR_SET_CHILD_SUBREAPER)");
  if (!foreground && getpgrp() != getpid() && setsid() < 0) fail("setsid");
  if (keep_fd >= 0) {
    int flags = fcntl(keep_fd, F_GETFD);
    if (flags < 0) fail("--keep-fd");
    if (fcntl(keep_fd, F_SETFD, flags | FD_CLOEXEC) != 0) fail("fcntl(F_SETFD)");
  }

  pid_t command = fork();
  if (command < 0) fail("fork");
  if (command == 0) {
    // The command: our process group, default signal mask; --foreground: it dies with us too.
    if (sigprocmask(SIG_SETMASK, &original, NULL) != 0) fail("sigprocmask");
    if (foreground && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl(PR_SET_PDEATHSIG)");
    execvp(command_argv[0], command_argv);
    int error = errno;
    if (error == ENOENT) fprintf(stderr, "flocklease: cannot run \"%s\": command not found\n", command_argv[0]);
    else fprintf(stderr, "flocklease: cannot run \"%s\": %s\n", command_argv[0], strerror(error));
    _exit(error == ENOENT ? 127 : 126);
  }

  int status = 0, done = 0;
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&waited, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      fail("sigwaitinfo");
    }
    if (sig == death_signal() || sig == SIGCHLD) {
      reap(command, &status, &done);
      // Reparented: the parent died (the death signal says so; anyone could send that number).
      if (getppid() != parent) on_parent_death(foreground, command, done);
      if (done) break;
      continue;
    }
    // A forwarded signal. Only what a process sent (si_code <= 0) is passed on, not the terminal's
    // copy (--foreground: it reached the command too). In group mode `run` signals the whole group,
    // so the command has its signals already, and our own forwarding comes back to us: pass on only
    // what another process sent the supervisor.
    if (done || info.si_code > 0) continue;
    if (foreground) {
      if (kill(command, sig) != 0 && errno != ESRCH) fail("kill");
    } else if (info.si_pid != parent && info.si_pid != getpid()) {
      if (kill(-getpgrp(), sig) != 0 && errno != ESRCH) fail("kill");
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return EXIT_SOFTWARE;
}
