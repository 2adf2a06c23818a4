/* The cost of a GridRPC call from C (what `gridwise bench rpc --client c` runs): synchronous
 * `add` calls timed one by one, then asynchronous ones kept WINDOW in flight with
 * grpc_wait_any. Prints one JSON object; with SAMPLES_FILE, also writes every synchronous
 * call's time there (µs, one a line), so that runs in turns can be pooled. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    USAGE(argc, argv, 5, "CLIENT_CONFIG SYNC_CALLS ASYNC_CALLS WINDOW [SAMPLES_FILE]");
    int sync_calls = atoi(argv[2]), async_calls = atoi(argv[3]), window = atoi(argv[4]);
    if (sync_calls < 1 || async_calls < 1 || window < 1) {
        fprintf(stderr, "counts must be positive\n");
        return 2;
    }
    grpc_function_handle_t h;
    CHECK(grpc_initialize(argv[1]));
    CHECK(grpc_function_handle_default(&h, "add"));
    int y = 0;
    for (int i = 0; i < 1000; i++) CHECK(grpc_call(&h, i, &y));

    double *lat = malloc(sizeof(double) * (size_t)sync_calls);
    for (int i = 0; i < sync_calls; i++) {
        double t = now_us();
        CHECK(grpc_call(&h, i, &y));
        lat[i] = now_us() - t;
        if (y != i + 1) {
            fprintf(stderr, "add(%d) returned %d\n", i, y);
            return 1;
        }
    }
    if (argc > 5) {
        FILE *f = fopen(argv[5], "w");
        if (!f) {
            perror(argv[5]);
            return 1;
        }
        for (int i = 0; i < sync_calls; i++) fprintf(f, "%.3f\n", lat[i]);
        fclose(f);
    }
    qsort(lat, (size_t)sync_calls, sizeof(double), cmp);
    double p50 = lat[sync_calls / 2], p99 = lat[(size_t)((sync_calls - 1) * 0.99)];

    grpc_sessionid_t *ids = malloc(sizeof(grpc_sessionid_t) * (size_t)window);
    int *ys = malloc(sizeof(int) * (size_t)window);
    int submitted = 0, done = 0;
    double t0 = now_us();
    for (int s = 0; s < window && submitted < async_calls; s++, submitted++) {
        CHECK(grpc_call_async(&h, &ids[s], submitted, &ys[s]));
    }
    while (done < async_calls) {
        grpc_sessionid_t id;
        CHECK(grpc_wait_any(&id));
        done++;
        int s = 0;
        while (s < window && ids[s] != id) s++;
        if (s == window) {
            fprintf(stderr, "grpc_wait_any returned an unknown session %d\n", id);
            return 1;
        }
        ids[s] = GRPC_SESSIONID_VOID;
        if (submitted < async_calls) {
            CHECK(grpc_call_async(&h, &ids[s], submitted, &ys[s]));
            submitted++;
        }
    }
    double per_s = async_calls / ((now_us() - t0) / 1e6);
    printf("{\"sync_p50_us\":%.1f,\"sync_p99_us\":%.1f,\"async_calls_per_s\":%.0f}\n", p50, p99,
           per_s);
    CHECK(grpc_function_handle_destruct(&h));
    CHECK(grpc_finalize());
    free(lat);
    free(ids);
    free(ys);
    return 0;
}
