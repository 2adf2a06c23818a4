/* Sixteen asynchronous calls, collected with grpc_wait_any in the order they finish, then
 * four more collected together with grpc_wait_and. */
#include "check.h"

enum { CALLS = 16 };

int main(int argc, char **argv) {
    USAGE(argc, argv, 2, "CLIENT_CONFIG");
    grpc_function_handle_t h;
    grpc_sessionid_t ids[CALLS];
    int x[CALLS], y[CALLS];

    CHECK(grpc_initialize(argv[1]));
    CHECK(grpc_function_handle_default(&h, "add"));
    for (int i = 0; i < CALLS; i++) {
        x[i] = 100 * i;
        y[i] = -1;
        CHECK(grpc_call_async(&h, &ids[i], x[i], &y[i]));
    }
    for (int done = 0; done < CALLS; done++) {
        grpc_sessionid_t id = GRPC_SESSIONID_VOID;
        CHECK(grpc_wait_any(&id));
        int i = 0;
        while (i < CALLS && ids[i] != id) i++;
        if (i == CALLS || y[i] != x[i] + 1) {
            fprintf(stderr, "session %d: wrong or unknown result\n", id);
            return 1;
        }
    }
    for (int i = 0; i < 4; i++) {
        y[i] = -1;
        CHECK(grpc_call_async(&h, &ids[i], x[i], &y[i]));
    }
    CHECK(grpc_wait_and(ids, 4));
    for (int i = 0; i < 4; i++) {
        if (y[i] != x[i] + 1) {
            fprintf(stderr, "wait_and: add(%d) gave %d\n", x[i], y[i]);
            return 1;
        }
    }
    printf("%d asynchronous calls, all right\n", CALLS + 4);
    CHECK(grpc_function_handle_destruct(&h));
    CHECK(grpc_finalize());
    return 0;
}
