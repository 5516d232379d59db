/* plan_child.h — a plan broken on purpose, checked in a child process
 * (the checks stop mpcc with an internal error, an abort): the unit tests
 * that plant faults in plans (test_share.c, test_sums.c). */
#ifndef PLAN_CHILD_H
#define PLAN_CHILD_H
#include "mpcc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn on the plan in a child, then the static check (verify.c) when
 * `statics` and the memory replay (verify_memory.c) when `replay`: true
 * if the child aborted. Its standard error is thrown away. */
static inline bool plan_aborts(Plan *p, void (*fn)(Plan *), bool statics, bool replay)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        fn(p);
        if (statics)
            plan_verify(p);
        if (replay)
            plan_verify_memory(p);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}
#endif
