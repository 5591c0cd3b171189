/* Unit tests of mf_remove (src/node/model_fetch.c): the files `mesh-llm models rm` and
 * DELETE /api/delete remove — a model file, every part of a split GGUF, each one's .part and
 * .source — and nothing else; a .part a download holds (its flock) stops the removal first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_fetch.h"

static char dir[256];

static void touch(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}

static bool exists(const char *name)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static int n_told;

static void told(void *data, const char *path)
{
    (void)path;
    assert_string_equal(data, "tag");
    n_told++;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mesh-mf-remove-XXXXXX");
    n_told = 0;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A whole file: it, its .part and its .source; a file of another name stays. */
static void test_remove_one_file(void **state)
{
    (void)state;
    touch("a.gguf");
    touch("a.gguf.source");
    touch("a.gguf.part");
    touch("ab.gguf");
    char why[600];
    assert_int_equal(mf_remove(dir, "a.gguf", told, "tag", why, sizeof why), 2);
    assert_int_equal(n_told, 3);
    assert_false(exists("a.gguf") || exists("a.gguf.part") || exists("a.gguf.source"));
    assert_true(exists("ab.gguf"));
    assert_int_equal(mf_remove(dir, "a.gguf", NULL, NULL, why, sizeof why), 0); /* gone */
}

/* A split GGUF: every part, downloaded or partial, with their sources. */
static void test_remove_split(void **state)
{
    (void)state;
    touch("m-00001-of-00003.gguf");
    touch("m-00001-of-00003.gguf.source");
    touch("m-00002-of-00003.gguf");
    touch("m-00003-of-00003.gguf.part");
    touch("m-00001-of-00002.gguf"); /* another split set */
    char why[600];
    assert_int_equal(mf_remove(dir, "m-00001-of-00003.gguf", NULL, NULL, why, sizeof why), 3);
    assert_false(exists("m-00001-of-00003.gguf") || exists("m-00002-of-00003.gguf") ||
                 exists("m-00003-of-00003.gguf.part") || exists("m-00001-of-00003.gguf.source"));
    assert_true(exists("m-00001-of-00002.gguf"));
}

/* A .part a download holds: nothing is removed, and why names it. */
static void test_locked_part_refused(void **state)
{
    (void)state;
    touch("m-00001-of-00002.gguf");
    touch("m-00002-of-00002.gguf.part");
    char p[512], why[600];
    snprintf(p, sizeof p, "%s/m-00002-of-00002.gguf.part", dir);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(mf_remove(dir, "m-00001-of-00002.gguf", NULL, NULL, why, sizeof why), -EBUSY);
    assert_string_equal(why, p);
    assert_true(exists("m-00001-of-00002.gguf") && exists("m-00002-of-00002.gguf.part"));
    close(fd); /* the download ended */
    assert_int_equal(mf_remove(dir, "m-00001-of-00002.gguf", NULL, NULL, why, sizeof why), 2);
}

static void test_not_a_file_name(void **state)
{
    (void)state;
    char why[600];
    assert_int_equal(mf_remove(dir, "../x.gguf", NULL, NULL, why, sizeof why), -EINVAL);
    assert_int_equal(mf_remove(dir, "..", NULL, NULL, why, sizeof why), -EINVAL);
    assert_int_equal(mf_remove(dir, "", NULL, NULL, why, sizeof why), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_remove_one_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locked_part_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_file_name, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
