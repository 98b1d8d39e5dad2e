/* A test shim (LD_PRELOAD) for 'long_runs': the first fsync() of a process
 * that has SLOW_FSYNC_MARK set creates that file and then sleeps for a minute,
 * so that the test can kill the process in the middle of writing a checkpoint
 * (hyfi syncs the new file's contents before it renames it over the target). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int fsync(int fd)
{
    static int done;
    const char *mark = getenv("SLOW_FSYNC_MARK");
    if (mark && !done) {
        done = 1;
        int m = open(mark, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (m >= 0) close(m);
        sleep(60);
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real ? real(fd) : 0;
}
