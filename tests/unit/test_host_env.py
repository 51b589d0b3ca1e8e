"""Host values at a launch site through host helpers (the gpuFLOPBench convolution3D layout): main reads
argv, a templated helper above main launches the kernel with its own parameters."""

from __future__ import annotations

SOURCE = """
#define REPEAT 10
template <typename T>
void conv3D(const int N, const int C, const int K, int repeat)
{
  int Hout = 32 - K + 1;
  conv3d<<<grid, block>>>(d_x, C, K, Hout);
}

int main(int argc, char* argv[]) {
  int N = 4;
  int C = 3 * N;
  conv3D<float>(N, C, 5, REPEAT);
  return 0;
}
"""


def test_a_helpers_parameters_take_the_values_of_its_call_in_main():
    from components.features.static.host_env import env_at, host_functions
    from components.features.static.loops import file_macros

    names = [f.name for f in host_functions(SOURCE)]
    assert names == ["conv3D", "main"]
    site = SOURCE.index("conv3d<<<")
    env = env_at(SOURCE, site, file_macros(SOURCE, {}))
    assert env["C"] == 12 and env["K"] == 5 and env["repeat"] == 10 and env["N"] == 4
    assert env["Hout"] == 28  # the helper's own local, from its bound parameter


def test_what_the_host_cannot_evaluate_stays_unknown():
    from components.features.static.host_env import env_at
    from components.features.static.loops import file_macros

    text = SOURCE.replace("int N = 4;", "int N = read_size();")
    env = env_at(text, text.index("conv3d<<<"), file_macros(text, {}))
    assert "N" not in env and "C" not in env  # never guessed
    assert env["K"] == 5


def test_the_gpuflopbench_host_reading_gives_the_kernel_its_scalar_arguments():
    from components.evaluation.gpuflopbench_flops import host_args

    text = SOURCE + "\n__global__ void conv3d(const float* x, const int C, const int K, const int Hout) {}\n"
    text = text.replace("int N = 4;", "int N = atoi(argv[1]);")
    assert host_args(text, "conv3d", ["2"]) == {"C": 6, "K": 5, "Hout": 28}


HACCMK_LIKE = """
#define MIN(a, b) ((a) <= (b) ? (a) : (b))
void run(const int n1, const int n2, int total_iterations, int num_iterations) {
  int t;
  for (t = 0; t < total_iterations; t += num_iterations) {
    int iter = MIN(num_iterations, total_iterations - t);
    kern<<<grid, block>>>(n1, n2, iter, 0);
  }
}

int main(int argc, char* argv[]) {
  int n1, n2, i;
  int total_iterations = 60;
  int pyramid_height = 1;
  n1 = 784;
  n2 = 15000;
  if ((total_iterations = atoi(argv[1])) <= 0 || (pyramid_height = atoi(argv[2])) <= 0) return 1;
  run(n1, n2, total_iterations, pyramid_height);
}

__global__ void kern(const int n1, const int n2, int iteration, int unused) {}
"""


def test_assignments_after_the_declaration_and_in_conditions_reach_the_launch():
    from components.evaluation.gpuflopbench_flops import host_args

    args = host_args(HACCMK_LIKE, "kern", ["200", "2"])
    # n2 assigned after `int n1, n2, i;`; the argv values assigned inside the if's condition; the
    # function-like MIN macro over the helper's loop variable at its first value (t = 0)
    assert args == {"n1": 784, "n2": 15000, "iteration": 2, "unused": 0}


def test_an_assignment_that_does_not_evaluate_makes_the_value_unknown():
    from components.evaluation.gpuflopbench_flops import host_args

    text = HACCMK_LIKE.replace("n2 = 15000;", "n2 = 15000;\n  n2 = read_count(file);")
    assert "n2" not in host_args(text, "kern", ["200", "2"])  # never the stale 15000


def test_a_constant_array_indexed_by_a_host_loop_gives_its_first_entry():
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
int main() {
  const int dim[] = {256, 1024, 4096};
  for (int i = 0; i < 3; i++) {
    const int n = dim[i];
    int a = 1, b = n / 2;
    layer<<<4096, 256>>>(x, n, a, b);
  }
}
__global__ void layer(float* x, int n, int a, int b) {}
"""
    assert host_args(text, "layer", []) == {"n": 256, "a": 1, "b": 128}


def test_assignments_off_the_path_to_the_launch_are_not_read_and_compound_ones_are():
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
int main(int argc, char** argv) {
  int length = atoi(argv[1]);
  if (length < 256) length = 256;
  int paths = 32;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-paths")) { paths = strtol(argv[++i], NULL, 10); }
  }
  paths *= 1024;
  int c = 4096;
  for (int i = 0; i < 8; i++) {
    if (i == 7) { c = length - 4096 * i; }
    kern<<<grid, block>>>(length, paths, c);
  }
}
__global__ void kern(int length, int paths, int c) {}
"""
    # the braceless if's body and the option loop's and the last chunk's blocks are not on every path
    assert host_args(text, "kern", ["100"]) == {"length": 100, "paths": 32768, "c": 4096}


def test_a_block_under_the_recorded_argc_is_taken_and_a_for_loops_step_is_not_read():
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
int main(int argc, char* argv[]) {
  int n = 1000;
  if (argc == 3) {
    n = atoi(argv[1]);
  }
  if (argc == 5) { n = 7; }
  for (int width = 3; width < 10; width += 2) {
    conv<<<grid, block>>>(n, width);
  }
}
__global__ void conv(int n, int width) {}
"""
    assert host_args(text, "conv", ["4096", "10"]) == {"n": 4096, "width": 3}  # the first pass's width
    assert host_args(text, "conv", ["4096"]) == {"n": 1000, "width": 3}  # argc == 2: the default stays


def test_strcmp_on_a_recorded_argument_picks_the_branch():
    from components.evaluation.gpuflopbench_flops import host_args

    text = """
int main(int argc, char** argv) {
  int n = 0;
  if (strcmp(argv[1], "r") == 0) {
    n = 1 << 20;
  } else {
    n = read_count(argv[1]);
  }
  sortk<<<grid, block>>>(n);
}
__global__ void sortk(int n) {}
"""
    assert host_args(text, "sortk", ["r"]) == {"n": 1 << 20}
    assert host_args(text, "sortk", ["data.txt"]) == {}  # the else runs: a count read from a file, unknown
