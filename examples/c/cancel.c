/* Cancels a call that would never end (`loop`), then shows the server still serves. */
#include <time.h>

#include "check.h"

int main(int argc, char **argv) {
    USAGE(argc, argv, 2, "CLIENT_CONFIG");
    grpc_function_handle_t spin, add;
    grpc_sessionid_t id;
    int ignored = 0, never = 0, y = 0;

    CHECK(grpc_initialize(argv[1]));
    CHECK(grpc_function_handle_default(&spin, "loop"));
    CHECK(grpc_call_async(&spin, &id, ignored, &never));
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    grpc_error_t e = grpc_probe(id);
    if (e != GRPC_NOT_COMPLETED) {
        fprintf(stderr, "probe of a running loop: %s\n", grpc_error_string(e));
        return 1;
    }
    CHECK(grpc_cancel(id));
    e = grpc_wait(id);
    if (e != GRPC_SESSION_FAILED) {
        fprintf(stderr, "wait after cancel: %s\n", grpc_error_string(e));
        return 1;
    }
    printf("loop cancelled: %s\n", gridwise_last_error_message());
    CHECK(grpc_function_handle_default(&add, "add"));
    CHECK(grpc_call(&add, 1, &y));
    printf("add(1) = %d afterwards\n", y);
    CHECK(grpc_function_handle_destruct(&spin));
    CHECK(grpc_function_handle_destruct(&add));
    CHECK(grpc_finalize());
    return y == 2 ? 0 : 1;
}
