"""``kernelcast features static FILE.cu``: registers, shared memory, spills, SASS mix, loops."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from components.features.static.sass import INSTRUCTION_CLASSES
from kernelcast.commands._common import clean_errors

# The table shows the classes up to barriers; the JSON output keeps every class.
_TABLE_CLASSES = INSTRUCTION_CLASSES[: INSTRUCTION_CLASSES.index("barrier") + 1]


@clean_errors
def static_command(
    file: Annotated[
        Path,
        typer.Argument(
            help="CUDA source (.cu; host code is stripped before compiling) or HIP "
            "source (.hip, compiled for an AMD ISA)"
        ),
    ],
    arch: Annotated[
        str,
        typer.Option(
            "--arch",
            help="target SM (sm_60 ... sm_120, or a compute capability such as "
            "7.0); one NVRTC cannot emit compiles for the nearest it can, and says so; "
            "an AMD ISA (gfx908, gfx90a, gfx942, gfx1030: HIP compiler, default gfx90a "
            "for .hip)",
        ),
    ] = "sm_90",
    kernel: Annotated[
        str | None, typer.Option("--kernel", help="only this kernel (short name or instance)")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    include: Annotated[
        list[Path] | None, typer.Option("-I", "--include", help="extra include folder (repeatable)")
    ] = None,
    define: Annotated[
        list[str] | None, typer.Option("-D", "--define", help="macro NAME or NAME=VALUE (repeatable)")
    ] = None,
    build_defaults: Annotated[
        bool,
        typer.Option(
            "--build-defaults/--no-build-defaults",
            help="take -D/-I from a Makefile/CMakeLists.txt beside FILE and default #error-guarded macros",
        ),
    ] = True,
) -> None:
    """Compile FILE with NVRTC -- or, for .hip / --arch gfx..., the HIP compiler -- (no GPU needed) and report
    static features per kernel."""
    from components.features.static.analyze import NoKernelError, analyze_file
    from components.features.static.compile import CompileError
    from kernelcast.commands._common import UserError

    if not file.is_file():
        raise UserError(f"FILE {file}: no such file")
    for folder in include or ():
        if not folder.is_dir():
            raise UserError(f"-I {folder}: no such folder")
    defines = parse_defines(define or ())
    from components.features.static.compile import check_arch

    hip = arch.strip().lower().startswith("gfx") or file.name.endswith(".hip")
    try:
        if hip:  # AMDGPU ISA from the HIP compiler (a .cu file goes through the HIP translation)
            from components.features.static.hip import check_amd_arch

            check_amd_arch("gfx90a" if arch == "sm_90" else arch)
        else:
            check_arch(arch)
    except ValueError as exc:
        raise UserError(f"--arch: {exc}") from None
    try:
        if hip:
            from components.features.static.hip import HipToolchainMissing, analyze_hip_file

            try:
                report = analyze_hip_file(
                    file,
                    "gfx90a" if arch == "sm_90" else arch,
                    kernel,
                    include_dirs=tuple(include or ()),
                    defines=defines,
                )
            except HipToolchainMissing as exc:
                raise UserError(str(exc)) from None
        else:
            report = analyze_file(
                file,
                arch,
                kernel,
                include_dirs=tuple(include or ()),
                defines=defines,
                build_defaults=build_defaults,
            )
    except NoKernelError as exc:
        raise UserError(str(exc)) from None
    except CompileError as exc:
        typer.echo(f"error: {exc}", err=True)
        typer.echo(exc.log.rstrip(), err=True)
        sys.exit(2)
    if json_out:
        out = {
            "file": str(file),
            "arch": report.arch,
            "requested_arch": report.requested_arch,
            "arch_note": report.arch_note,
            "defines": report.defines,
            "source_id": report.source_id,
            "kernels": {
                k.instance or k.name: {
                    "name": k.short_name,
                    "symbol": k.name,
                    "registers": k.registers,
                    "shared_bytes": k.shared_bytes,
                    "spills": k.spills,
                    "stack_bytes": k.stack_bytes,
                    "barriers": k.barriers,
                    "instructions": k.instructions,
                    "loop_instructions": k.loop_instructions,
                    "loops": k.loops,
                    **({"amd": k.extra} if k.extra else {}),
                }
                for k in report.kernels
            },
            "uninstantiated_templates": report.uninstantiated_templates,
        }
        typer.echo(json.dumps(out, indent=2))
        return
    _print_table(report)


def parse_defines(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """['N=1024', 'FLOAT'] -> {'N': '1024', 'FLOAT': ''}; a malformed name is a UserError naming it."""
    import re

    from kernelcast.commands._common import UserError

    out: dict[str, str] = {}
    for item in items:
        name, _, value = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_]\w*", name.strip()):
            raise UserError(f"-D {item!r}: expected NAME or NAME=VALUE with NAME a C identifier")
        out[name.strip()] = value
    return out


def _print_table(report: object) -> None:
    kernels = report.kernels  # type: ignore[attr-defined]
    if not kernels:
        typer.echo("no kernels compiled (template kernels need a launch site k<...><<<...>>> in the file)")
        return
    typer.echo(f"{len(kernels)} kernel(s), {report.arch}")  # type: ignore[attr-defined]
    if report.arch_note:  # type: ignore[attr-defined]
        typer.echo(f"note: {report.arch_note}", err=True)  # type: ignore[attr-defined]
    header = f"{'kernel':<32} {'regs':>4} {'smem':>6} {'spill':>5} {'loops':>5} {'depth':>5} {'total':>6}"
    typer.echo(header + "  top classes")
    for k in kernels:
        label = (k.instance or k.short_name)[:32]
        top = sorted(((k.instructions[c], c) for c in _TABLE_CLASSES if k.instructions.get(c)), reverse=True)[
            :5
        ]
        spill = k.spills["store_bytes"] + k.spills["load_bytes"]
        typer.echo(
            f"{label:<32} {k.registers:>4} {k.shared_bytes:>6} {spill:>5} {k.loops['count']:>5} "
            f"{k.loops['max_depth']:>5} {k.instructions['total']:>6}  " + " ".join(f"{c}={n}" for n, c in top)
        )
    for name in report.uninstantiated_templates:  # type: ignore[attr-defined]
        typer.echo(f"note: template launch {name} could not be instantiated", err=True)
