#include "conductor/cli/cli.hpp"

int main(int argc, char** argv) { return conductor::cli::main(argc, argv); }
