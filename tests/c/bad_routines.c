/* Routines that misbehave, for the crash-isolation tests: each is a Fortran-style subroutine
 * (arguments by reference) `f(n, y)` that should set y = n + 1 and does something else. */
#include <stdlib.h>
#include <string.h>

void maybe_segv_(const int *n, double *y) {
    if (*n < 0) {
        volatile int *nowhere = 0;
        *nowhere = *n;
    }
    *y = *n + 1.0;
}

void abort_now_(const int *n, double *y) {
    (void)n;
    (void)y;
    abort();
}

void exit_now_(const int *n, double *y) {
    (void)y;
    exit(*n);
}

void hog_(const int *n, double *y) {
    (void)n;
    (void)y;
    for (;;) {
        char *p = malloc(1 << 24);
        memset(p, 1, 1 << 24); /* NULL once the limit is reached: a segfault, as in real code */
    }
}

void spin_(const int *n, double *y) {
    volatile double x = *n;
    for (;;) {
        x = x * 1.0000001 + 1.0;
    }
    *y = x;
}
