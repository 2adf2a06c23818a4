/* C = A B for random 100 x 80 and 80 x 120 matrices, checked against a product computed here.
 * With a second argument (a server's host:port), the call is bound to that server. */
#include <math.h>

#include "check.h"

enum { M = 100, K = 80, N = 120 };

static double a[M * K], b[K * N], c[M * N], want[M * N];

int main(int argc, char **argv) {
    USAGE(argc, argv, 2, "CLIENT_CONFIG [SERVER_HOST:PORT]");
    grpc_function_handle_t h;
    unsigned s = 12345;
    for (int i = 0; i < M * K; i++) a[i] = (double)((s = s * 1103515245u + 12345u) >> 16) / 65536.0;
    for (int i = 0; i < K * N; i++) b[i] = (double)((s = s * 1103515245u + 12345u) >> 16) / 65536.0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) sum += a[i * K + k] * b[k * N + j];
            want[i * N + j] = sum;
        }

    CHECK(grpc_initialize(argv[1]));
    if (argc > 2) {
        CHECK(grpc_function_handle_init(&h, argv[2], "dgemm"));
    } else {
        CHECK(grpc_function_handle_default(&h, "dgemm"));
    }
    /* dgemm(m, n, k, A[m,k], B[k,n], out C[m,n]), row-major */
    CHECK(grpc_call(&h, M, N, K, a, b, c));
    double worst = 0.0;
    for (int i = 0; i < M * N; i++) {
        double err = fabs(c[i] - want[i]) / fabs(want[i]);
        if (err > worst) worst = err;
    }
    printf("dgemm %dx%dx%d: largest relative error %.3g\n", M, N, K, worst);
    CHECK(grpc_function_handle_destruct(&h));
    CHECK(grpc_finalize());
    return worst < 1e-12 ? 0 : 1;
}
