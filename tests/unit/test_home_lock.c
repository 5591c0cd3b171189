/* Unit tests for src/base/home_lock.h: one node per MESH_LLM_HOME. The holder is another
 * process (a forked child): POSIX record locks never conflict within one process. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "home_lock.h"

typedef struct {
    char root[64];
    char home[128];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    snprintf(f->root, sizeof f->root, "/tmp/mesh-home-lock-XXXXXX");
    if (!f || !mkdtemp(f->root)) return -1;
    snprintf(f->home, sizeof f->home, "%s/a/b/.mesh-llm", f->root); /* parents missing */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* A child that takes the lock, tells the parent through a pipe, and waits to be killed. */
static pid_t holder_child(const char *home)
{
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int fd;
        pid_t h;
        char ok = home_lock(home, &fd, &h) == 0 ? 'y' : 'n';
        if (write(p[1], &ok, 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char c = 0;
    close(p[1]);
    if (read(p[0], &c, 1) != 1 || c != 'y') pid = -1;
    close(p[0]);
    return pid;
}

static void test_second_taker_is_refused_with_the_holders_pid(void **state)
{
    fx_t *f = *state;
    assert_int_equal(home_lock_holder(f->home), 0); /* no lock file yet */
    pid_t child = holder_child(f->home);
    assert_true(child > 0);
    struct stat st;
    assert_int_equal(stat(f->home, &st), 0); /* created with its parents, private */
    assert_int_equal(st.st_mode & 0777, 0700);
    int fd = -2;
    pid_t holder = 0;
    assert_int_equal(home_lock(f->home, &fd, &holder), -EWOULDBLOCK);
    assert_int_equal(fd, -1);
    assert_int_equal(holder, child);
    assert_int_equal(home_lock_holder(f->home), child);
    char msg[1024];
    home_lock_refusal(msg, sizeof msg, f->home, holder);
    char want[64];
    snprintf(want, sizeof want, "(pid %ld)", (long)child);
    assert_non_null(strstr(msg, want));
    assert_non_null(strstr(msg, "MESH_LLM_HOME="));

    /* the lock goes with its process */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(home_lock_holder(f->home), 0);
    assert_int_equal(home_lock(f->home, &fd, &holder), 0);
    assert_true(fd >= 0);
    char text[32] = "";
    FILE *lf;
    char path[160];
    snprintf(path, sizeof path, "%s/lock", f->home);
    assert_non_null(lf = fopen(path, "r"));
    assert_non_null(fgets(text, sizeof text, lf));
    fclose(lf);
    assert_int_equal(atol(text), (long)getpid()); /* the holder's pid, for people */
    close(fd);
}

static void test_unknown_holder_says_so(void **state)
{
    (void)state;
    char msg[1024];
    home_lock_refusal(msg, sizeof msg, "/h", 0);
    assert_non_null(strstr(msg, "another mesh-llm node is already running"));
    assert_null(strstr(msg, "pid"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_second_taker_is_refused_with_the_holders_pid, setup,
                                        teardown),
        cmocka_unit_test(test_unknown_holder_says_so),
    };
    return cmocka_run_group_tests_name("home_lock", tests, NULL, NULL);
}
