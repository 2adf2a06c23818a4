/* Shared by the examples: stop with the GridRPC error, in words, when a call fails. */
#ifndef GRIDWISE_EXAMPLES_CHECK_H
#define GRIDWISE_EXAMPLES_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "grpc.h"

#define CHECK(call)                                                                     \
    do {                                                                                \
        grpc_error_t check_e_ = (call);                                                 \
        if (check_e_ != GRPC_NO_ERROR) {                                                \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,          \
                    grpc_error_string(check_e_), gridwise_last_error_message());        \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define USAGE(argc, argv, n, args)                                                      \
    do {                                                                                \
        if ((argc) < (n)) {                                                             \
            fprintf(stderr, "usage: %s %s\n", (argv)[0], args);                         \
            return 2;                                                                   \
        }                                                                               \
    } while (0)

#endif
