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
