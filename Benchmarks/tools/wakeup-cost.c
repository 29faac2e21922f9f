/*
 * wakeup-cost: what one process waking another costs on this machine.
 *
 * Two processes pass one byte back and forth over a pair of pipes N times; each round trip is
 * two wakeups. Prints the wall time per round trip. Run it as is (the scheduler places the two
 * processes, usually on different CPUs) and pinned to one CPU, and compare; `time` adds the
 * CPU it cost:
 *
 *   cc -O2 -o /tmp/wakeup-cost Benchmarks/tools/wakeup-cost.c
 *   time /tmp/wakeup-cost 20000
 *   time taskset -c 0 /tmp/wakeup-cost 20000
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    if (rounds <= 0) {
        fprintf(stderr, "usage: %s [round trips, default 20000]\n", argv[0]);
        return 2;
    }
    int there[2], back[2];
    if (pipe(there) != 0 || pipe(back) != 0) {
        perror("pipe");
        return 1;
    }
    char byte = 'x';
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        for (long i = 0; i < rounds; i++) {
            if (read(there[0], &byte, 1) != 1 || write(back[1], &byte, 1) != 1) _exit(1);
        }
        _exit(0);
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < rounds; i++) {
        if (write(there[1], &byte, 1) != 1 || read(back[0], &byte, 1) != 1) {
            perror("round trip");
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    int status = 0;
    waitpid(child, &status, 0);
    double micros = ((end.tv_sec - start.tv_sec) * 1e6 + (end.tv_nsec - start.tv_nsec) / 1e3) / rounds;
    printf("%ld round trips, %.2f us each (2 wakeups per round trip)\n", rounds, micros);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
