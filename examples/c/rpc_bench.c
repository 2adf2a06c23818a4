/* The cost of a GridRPC call from C (what `gridwise bench rpc --client c` runs): synchronous
 * `add` calls timed one by one, then asynchronous ones kept WINDOW in flight with
 * grpc_wait_any. Prints one JSON object.
 *
 * With `-` for the counts, it reads commands on standard input instead, so that a driver can
 * give it turns between other measurements without starting it afresh: `sync N FILE` (N timed
 * calls, every time written to FILE in µs, one a line), `async N WINDOW`, `quit`; it answers
 * each with one JSON line. */
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

/* `n` timed synchronous calls into `lat`; 0 on success. */
static int run_sync(grpc_function_handle_t *h, int n, double *lat) {
    int y = 0;
    for (int i = 0; i < n; i++) {
        double t = now_us();
        CHECK(grpc_call(h, i, &y));
        lat[i] = now_us() - t;
        if (y != i + 1) {
            fprintf(stderr, "add(%d) returned %d\n", i, y);
            return 1;
        }
    }
    return 0;
}

/* `n` asynchronous calls, `window` in flight; their rate in `per_s`; 0 on success. */
static int run_async(grpc_function_handle_t *h, int n, int window, double *per_s) {
    grpc_sessionid_t *ids = malloc(sizeof(grpc_sessionid_t) * (size_t)window);
    int *ys = malloc(sizeof(int) * (size_t)window);
    int submitted = 0, done = 0;
    for (int s = 0; s < window; s++) ids[s] = GRPC_SESSIONID_VOID;
    double t0 = now_us();
    for (int s = 0; s < window && submitted < n; s++, submitted++) {
        CHECK(grpc_call_async(h, &ids[s], submitted, &ys[s]));
    }
    while (done < n) {
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
        if (submitted < n) {
            CHECK(grpc_call_async(h, &ids[s], submitted, &ys[s]));
            submitted++;
        }
    }
    *per_s = n / ((now_us() - t0) / 1e6);
    free(ids);
    free(ys);
    return 0;
}

/* Answers commands on standard input until `quit` or its end. */
static int serve(grpc_function_handle_t *h) {
    char line[4096], file[4000];
    while (fgets(line, sizeof line, stdin)) {
        int n = 0, window = 0;
        if (sscanf(line, "sync %d %3999s", &n, file) == 2 && n > 0) {
            double *lat = malloc(sizeof(double) * (size_t)n);
            if (run_sync(h, n, lat)) return 1;
            FILE *f = fopen(file, "w");
            if (!f) {
                perror(file);
                return 1;
            }
            for (int i = 0; i < n; i++) fprintf(f, "%.3f\n", lat[i]);
            fclose(f);
            free(lat);
            printf("{\"sync_calls\":%d}\n", n);
        } else if (sscanf(line, "async %d %d", &n, &window) == 2 && n > 0 && window > 0) {
            double per_s = 0;
            if (run_async(h, n, window, &per_s)) return 1;
            printf("{\"async_calls_per_s\":%.0f}\n", per_s);
        } else if (strncmp(line, "quit", 4) == 0) {
            return 0;
        } else {
            fprintf(stderr, "unknown command: %s", line);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    USAGE(argc, argv, 3, "CLIENT_CONFIG (SYNC_CALLS ASYNC_CALLS WINDOW | -)");
    int commands = strcmp(argv[2], "-") == 0;
    int sync_calls = 0, async_calls = 0, window = 0;
    if (!commands) {
        USAGE(argc, argv, 5, "CLIENT_CONFIG SYNC_CALLS ASYNC_CALLS WINDOW");
        sync_calls = atoi(argv[2]);
        async_calls = atoi(argv[3]);
        window = atoi(argv[4]);
        if (sync_calls < 1 || async_calls < 1 || window < 1) {
            fprintf(stderr, "counts must be positive\n");
            return 2;
        }
    }
    grpc_function_handle_t h;
    CHECK(grpc_initialize(argv[1]));
    CHECK(grpc_function_handle_default(&h, "add"));
    int y = 0;
    for (int i = 0; i < 1000; i++) CHECK(grpc_call(&h, i, &y));
    int rc = 0;
    if (commands) {
        printf("{\"ready\":true}\n");
        fflush(stdout);
        rc = serve(&h);
    } else {
        double *lat = malloc(sizeof(double) * (size_t)sync_calls), per_s = 0;
        if (run_sync(&h, sync_calls, lat) || run_async(&h, async_calls, window, &per_s)) return 1;
        qsort(lat, (size_t)sync_calls, sizeof(double), cmp);
        double p50 = lat[sync_calls / 2], p99 = lat[(size_t)((sync_calls - 1) * 0.99)];
        printf("{\"sync_p50_us\":%.1f,\"sync_p99_us\":%.1f,\"async_calls_per_s\":%.0f}\n", p50,
               p99, per_s);
        free(lat);
    }
    CHECK(grpc_function_handle_destruct(&h));
    CHECK(grpc_finalize());
    return rc;
}
