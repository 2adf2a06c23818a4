/* The argument-stack form: arguments pushed one by one (scalars by pointer), for programs
 * that build calls at run time. A 2x2 dgemm, synchronous then asynchronous. */
#include "check.h"

int main(int argc, char **argv) {
    USAGE(argc, argv, 2, "CLIENT_CONFIG");
    grpc_function_handle_t h;
    grpc_sessionid_t id;
    int m = 2, n = 2, k = 2;
    double a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8}, c[4] = {0}, want[] = {19, 22, 43, 50};

    CHECK(grpc_initialize(argv[1]));
    CHECK(grpc_function_handle_default(&h, "dgemm"));
    grpc_arg_stack_t *args = grpc_arg_stack_new(6);
    if (args == NULL) {
        fprintf(stderr, "grpc_arg_stack_new: %s\n", gridwise_last_error_message());
        return 1;
    }
    CHECK(grpc_arg_stack_push_arg(args, &m));
    CHECK(grpc_arg_stack_push_arg(args, &n));
    CHECK(grpc_arg_stack_push_arg(args, &k));
    CHECK(grpc_arg_stack_push_arg(args, a));
    CHECK(grpc_arg_stack_push_arg(args, b));
    CHECK(grpc_arg_stack_push_arg(args, c));
    CHECK(grpc_call_argstack(&h, args));
    for (int i = 0; i < 4; i++) {
        if (c[i] != want[i]) {
            fprintf(stderr, "argstack dgemm: c[%d] = %g, not %g\n", i, c[i], want[i]);
            return 1;
        }
        c[i] = 0;
    }
    CHECK(grpc_call_argstack_async(&h, &id, args));
    CHECK(grpc_wait(id));
    for (int i = 0; i < 4; i++) {
        if (c[i] != want[i]) {
            fprintf(stderr, "async argstack dgemm: c[%d] = %g\n", i, c[i]);
            return 1;
        }
    }
    /* The last argument comes off first. */
    if (grpc_arg_stack_pop_arg(args) != (void *)c) {
        fprintf(stderr, "pop did not return the last argument pushed\n");
        return 1;
    }
    CHECK(grpc_arg_stack_destruct(args));
    printf("argstack dgemm: [%g %g; %g %g]\n", c[0], c[1], c[2], c[3]);
    CHECK(grpc_function_handle_destruct(&h));
    CHECK(grpc_finalize());
    return 0;
}
