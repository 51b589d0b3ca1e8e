"""Static features of kernel source, without a GPU: ``analyze`` orchestrates one compile and its report;
the parts: ``source`` (host code stripped, launch sites harvested), ``templates`` (template launches
resolved), ``build`` (guard defaults), ``compile`` (NVRTC in a sandboxed child), ``sass`` (nvdisasm,
instruction classes, loops), ``names`` (names from mangled symbols, join keys), ``cache`` (results on
disk), ``options`` (the analysers' keyword options), ``frames`` (reports as ``s_*`` feature rows),
``table`` (the static stage's table); AMD:
``hip_translate`` (CUDA -> HIP), ``hip`` (clang -> AMDGPU code objects), ``amdgpu`` (ISA and
``hip_table``."""
