/* The smallest GridRPC program: add(41) on whichever server the agent picks. */
#include "check.h"

int main(int argc, char **argv) {
    USAGE(argc, argv, 2, "CLIENT_CONFIG");
    grpc_function_handle_t h;
    int x = 41, y = 0;

    CHECK(grpc_initialize(argv[1]));
    CHECK(grpc_function_handle_default(&h, "add"));
    CHECK(grpc_call(&h, x, &y));
    printf("add(%d) = %d\n", x, y);
    CHECK(grpc_function_handle_destruct(&h));
    CHECK(grpc_finalize());
    return y == x + 1 ? 0 : 1;
}
