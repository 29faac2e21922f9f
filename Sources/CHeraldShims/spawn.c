#define _GNU_SOURCE
#include "CHeraldShims.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <unistd.h>

int herald_on_main_thread(void) {
    return (pid_t)syscall(SYS_gettid) == getpid();
}

static void report_and_exit(int fd, int error) {
    while (write(fd, &error, sizeof error) < 0 && errno == EINTR) {}
    _exit(127);
}

/* Only async-signal-safe calls between fork and exec: the parent has threads. */
int herald_spawn_tied(const char *file, char *const argv[], char *const envp[], const char *log_path, pid_t *pid) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return errno;
    pid_t parent = getpid();
    /* Read before fork: the child may only make async-signal-safe calls. */
    struct rlimit files;
    unsigned max_fd = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY && files.rlim_cur < 1u << 20
        ? (unsigned)files.rlim_cur : 65536u;
    pid_t child = fork();
    if (child < 0) {
        int error = errno;
        close(report[0]);
        close(report[1]);
        return error;
    }
    if (child == 0) {
        int error = 0;
        sigset_t empty;
        sigemptyset(&empty);
        if (sigprocmask(SIG_SETMASK, &empty, NULL) != 0) error = errno;
        if (!error && prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) error = errno;
        /* The parent may have died before the line above took effect. */
        if (!error && getppid() != parent) _exit(127);
        /* Nothing of the parent's but standard I/O: its sockets and pipes (some not close-on-exec)
           would otherwise stay open for as long as the child lives. The report pipe is first
           moved above standard I/O (it may have got fd 0-2 if those were closed); it closes on exec. */
        int writer = fcntl(report[1], F_DUPFD_CLOEXEC, 3);
        if (writer < 0) report_and_exit(report[1], errno);
        if (writer > 3 && close_range(3, (unsigned)writer - 1, 0) != 0) {
            for (int fd = 3; fd < writer; fd++) close(fd);
        }
        if (close_range((unsigned)writer + 1, ~0U, 0) != 0) {
            /* Kernels before 5.9 or a seccomp filter: close them one by one. */
            for (unsigned fd = (unsigned)writer + 1; fd < max_fd; fd++) close((int)fd);
        }
        report[1] = writer;
        /* Herald ignores SIGPIPE; the program it starts gets the default back. */
        if (!error && signal(SIGPIPE, SIG_DFL) == SIG_ERR) error = errno;
        if (!error) {
            int in = open("/dev/null", O_RDONLY);
            int out = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (in < 0 || out < 0) error = errno;
            else if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) error = errno;
            if (in > 2) close(in);
            if (out > 2) close(out);
        }
        if (!error) {
            execvpe(file, argv, envp);
            error = errno;
        }
        report_and_exit(report[1], error);
    }
    close(report[1]);
    int error = 0;
    ssize_t got;
    do { got = read(report[0], &error, sizeof error); } while (got < 0 && errno == EINTR);
    if (got < 0) error = errno;
    close(report[0]);
    if (got != 0) {
        /* The child could not start the program: reap it and say why. */
        if (error == 0) error = EIO;
        int status;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
        return error;
    }
    *pid = child;
    return 0;
}

int herald_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                 int stdin_fd, int stdout_fd, int stderr_fd, pid_t *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int error = posix_spawn_file_actions_init(&actions);
    if (error) return error;
    error = posix_spawnattr_init(&attributes);
    if (error) {
        posix_spawn_file_actions_destroy(&actions);
        return error;
    }
    /* A descriptor that is already in place is marked inheritable by adddup2 (glibc 2.29 and
       later); one that is not is copied over its target. */
    int sources[3] = {stdin_fd, stdout_fd, stderr_fd};
    for (int target = 0; target < 3 && !error; target++) {
        error = posix_spawn_file_actions_adddup2(&actions, sources[target], target);
    }
    /* Nothing else of this process's: a pipe's writing end left open in a long-lived child
       would keep its reader from ever seeing the end. */
    if (!error) error = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (!error && cwd) error = posix_spawn_file_actions_addchdir_np(&actions, cwd);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    if (!error) error = posix_spawnattr_setsigmask(&attributes, &none);
    if (!error) error = posix_spawnattr_setsigdefault(&attributes, &all);
    if (!error) error = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (!error) error = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return error;
}
