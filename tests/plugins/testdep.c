/*
 * testdep.c — a shared library the missing-dep test plugin links against.
 * It is built into a directory that is on no search path, so dlopen of
 * that plugin fails the way a plugin missing libcudart does.
 */
int minfer_testdep_value(void);
__attribute__((visibility("default"))) int minfer_testdep_value(void)
{
    return 42;
}
