/* ironflow-enter: a local sandbox's first process (ironflow.local.sandbox.spawn).
 *
 *   ironflow-enter N JOIN... S [ROOT SOURCE STAGED...] M RESOURCE VALUE... UID GID PARENT -- PROGRAM ARG...
 *
 * Writes itself into each of the N cgroup files JOIN (on cgroup v1 a process that moves itself
 * skips the RCU grace period a move by another process waits out); with S sources, takes a
 * private mount namespace, covers ROOT with a small tmpfs and binds each SOURCE (opened before
 * ROOT was covered) at its STAGED path there, as identity.bind_staged does between fork and exec
 * (bubblewrap, once it dropped to the host uid, could not reach a source under a 0700 home);
 * sets each of the M rlimits RESOURCE to VALUE (soft and hard: after every open); drops to UID and
 * GID with no supplementary group (both "-": a worker that is not root keeps its own); with a
 * PARENT pid (not 0), asks for SIGKILL once that parent dies (last: a uid change clears it) and
 * refuses to go on if it already has; then executes PROGRAM (bubblewrap, which waits on its own
 * gate, or runsc, which has no --die-with-parent). It does what bash and setpriv, or Python
 * between fork and exec, did in one exec of a few kilobytes: the worker forks nothing of its own.
 * Any failure exits 125 with one line (ironflow-enter: ...) before anything of the sandbox ran, which
 * the worker reports as the sandbox's failure, not the step's; nothing is inherited but
 * what the caller passed (its fds are its own business). Built by scripts/install (cc); without it
 * the worker falls back to bash and setpriv, or to its own setup between fork and exec.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_STAGED 256

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "ironflow-enter: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(125);
}

static unsigned long long number(const char *text, unsigned long long max) {
  char *end = NULL;
  if (text == NULL || *text < '0' || *text > '9') fail("not a number", text);
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value > max) fail("not a number in range", text);
  return value;
}

/* The S sources bound at their staged paths under ROOT, in a mount namespace of its own. */
static void stage(int *i, int argc, char **argv) {
  unsigned long long count = number(*i < argc ? argv[(*i)++] : NULL, MAX_STAGED);
  if (count == 0) return;
  if (*i >= argc) fail("missing staging root", NULL);
  const char *root = argv[(*i)++];
  if (unshare(CLONE_NEWNS) != 0) fail("cannot take a mount namespace", strerror(errno));
  if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail("cannot make its mounts private", strerror(errno));
  int fds[MAX_STAGED];
  const char *paths[MAX_STAGED];
  for (unsigned long long k = 0; k < count; k++) { /* opened here, in the new namespace, before ROOT is covered */
    if (*i + 1 >= argc) fail("missing staged source", NULL);
    fds[k] = open(argv[(*i)++], O_PATH | O_CLOEXEC);
    if (fds[k] < 0) fail("cannot open a source to stage", strerror(errno));
    paths[k] = argv[(*i)++];
  }
  if (mount("tmpfs", root, "tmpfs", 0, "mode=0755,size=64k") != 0) fail("cannot cover the staging root", strerror(errno));
  for (unsigned long long k = 0; k < count; k++) {
    struct stat st;
    char source[64];
    if (fstat(fds[k], &st) != 0) fail("cannot stat a staged source", strerror(errno));
    if (S_ISDIR(st.st_mode) ? mkdir(paths[k], 0755) != 0 : mknod(paths[k], S_IFREG | 0644, 0) != 0)
      fail("cannot make a staged path", strerror(errno));
    snprintf(source, sizeof source, "/proc/self/fd/%d", fds[k]);
    if (mount(source, paths[k], NULL, MS_BIND | MS_REC, NULL) != 0) fail("cannot bind a staged source", strerror(errno));
    close(fds[k]);
  }
}

int main(int argc, char **argv) {
  int i = 1;
  unsigned long long joins = number(i < argc ? argv[i++] : NULL, (unsigned long long)argc);
  for (unsigned long long k = 0; k < joins; k++) {
    if (i >= argc) fail("missing cgroup file", NULL);
    const char *path = argv[i++];
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) fail("cannot join its cgroup", strerror(errno));
    close(fd);
  }
  stage(&i, argc, argv);
  unsigned long long limits = number(i < argc ? argv[i++] : NULL, (unsigned long long)argc);
  for (unsigned long long k = 0; k < limits; k++) {
    if (i + 1 >= argc) fail("missing rlimit", NULL);
    int resource = (int)number(argv[i++], RLIM_NLIMITS - 1);
    rlim_t value = (rlim_t)number(argv[i++], ULLONG_MAX);
    struct rlimit limit = {value, value};
    if (setrlimit(resource, &limit) != 0) fail("cannot set an rlimit", strerror(errno));
  }
  if (i + 3 >= argc) fail("missing uid, gid, parent or --", NULL);
  const char *uid_text = argv[i++], *gid_text = argv[i++];
  pid_t parent = (pid_t)number(argv[i++], INT_MAX);
  if (strcmp(argv[i++], "--") != 0 || i >= argc) fail("missing -- PROGRAM", NULL);
  if (strcmp(uid_text, "-") != 0 || strcmp(gid_text, "-") != 0) {
    uid_t uid = (uid_t)number(uid_text, UINT_MAX - 1);
    gid_t gid = (gid_t)number(gid_text, UINT_MAX - 1);
    if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
      fail("cannot drop to its uid", strerror(errno));
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid) fail("still holds another uid", NULL);
  }
  if (parent != 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("cannot ask to die with its parent", strerror(errno));
    if (getppid() != parent) fail("its parent is gone", NULL); /* it died before the prctl: no signal will come */
  }
  execvp(argv[i], argv + i); /* on the PATH of its environment (launch.RUNTIME_ENV), as bash found it */
  fail("cannot execute", strerror(errno));
  return 125;
}
