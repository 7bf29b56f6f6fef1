"""Hand-written PTX kernels whose access patterns the profile tests count by hand."""

from __future__ import annotations

HEAD = """.version 8.5
.target {arch}
.address_size 64
"""


def row_read(vector: bool, lanes: int) -> str:
    """Each of the first ``lanes`` lanes reads 16 bytes (``ld.global.v4.f32``)
    or 4 bytes (``ld.global.f32``) at ``src + lane * width`` and writes them
    to ``dst`` at the same offset; the other lanes are predicated off."""
    width = 16 if vector else 4
    load = ("ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4];" if vector else "ld.global.f32 %f1, [%rd4];")
    store = ("st.global.v4.f32 [%rd5], {%f1, %f2, %f3, %f4};" if vector else "st.global.f32 [%rd5], %f1;")
    return HEAD.format(arch="sm_80") + f"""
.visible .entry row_read(.param .u64 src, .param .u64 dst)
{{
    .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f32 %f<6>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, {lanes};
    mul.wide.u32 %rd3, %r1, {width};
    add.u64 %rd4, %rd1, %rd3;
    add.u64 %rd5, %rd2, %rd3;
    @%p1 {load}
    @%p1 {store}
    ret;
}}
"""


COLUMN_READ = HEAD.format(arch="sm_80") + """
.visible .entry column_read(.param .u64 src, .param .u64 dst)
{
    .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f32 %f<2>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 128;            // row lane of a 32 x 32 f32 matrix, column 0
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mul.wide.u32 %rd5, %r1, 4;
    add.u64 %rd6, %rd2, %rd5;
    st.global.f32 [%rd6], %f1;
    ret;
}
"""


def transpose(stride: int) -> str:
    """A 32 x 32 f32 transpose through shared memory (block 32 x 32): each
    thread stores ``tile[ty][tx]`` (row stride ``stride`` words), then reads
    ``tile[tx][ty]``; unpadded (32) every lane of the column read hits one
    bank, padded (33) none do."""
    return HEAD.format(arch="sm_80") + f"""
.visible .entry transpose(.param .u64 src, .param .u64 dst)
{{
    .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .f32 %f<2>;
    .shared .align 16 .b8 tile[{32 * stride * 4}];
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %tid.y;
    mad.lo.u32 %r3, %r2, 32, %r1;
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.u32 %r4, tile;
    mad.lo.u32 %r5, %r2, {stride}, %r1;
    shl.b32 %r6, %r5, 2;
    add.u32 %r7, %r4, %r6;
    st.shared.f32 [%r7], %f1;
    bar.sync 0;
    mad.lo.u32 %r8, %r1, {stride}, %r2;
    shl.b32 %r9, %r8, 2;
    add.u32 %r10, %r4, %r9;
    ld.shared.f32 %f1, [%r10];
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f1;
    ret;
}}
"""


def ldmatrix(swizzle: bool) -> str:
    """One warp: copy a 16 x 32 bf16 tile (64-byte rows) from global to shared
    (16-byte chunks, optionally at 128B-swizzled addresses: chunk bits 4-6
    XOR address bits 7-9), then ``ldmatrix.x4`` the A fragment of
    ``mma.m16n8k16`` (lane l gives row l % 16, chunk l / 16) and write each
    lane's four registers to ``dst``."""
    def swz(reg: str, out: str) -> str:
        if not swizzle:
            return f"mov.u32 {out}, {reg};"
        return (f"shr.u32 %r20, {reg}, 7; and.b32 %r20, %r20, 7; shl.b32 %r20, %r20, 4; "
                f"xor.b32 {out}, {reg}, %r20;")
    return HEAD.format(arch="sm_80") + f"""
.visible .entry ldm(.param .u64 src, .param .u64 dst)
{{
    .reg .b32 %r<24>; .reg .b64 %rd<8>;
    .shared .align 1024 .b8 tile[1024];
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 5;                    // 32 bytes of the tile per lane
    cvt.u64.u32 %rd3, %r2;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.v4.b32 {{%r4, %r5, %r6, %r7}}, [%rd4];
    ld.global.v4.b32 {{%r8, %r9, %r10, %r11}}, [%rd4+16];
    {swz("%r2", "%r12")}
    add.u32 %r13, %r2, 16;
    {swz("%r13", "%r14")}
    mov.u32 %r3, tile;
    add.u32 %r12, %r12, %r3;
    add.u32 %r14, %r14, %r3;
    st.shared.v4.b32 [%r12], {{%r4, %r5, %r6, %r7}};
    st.shared.v4.b32 [%r14], {{%r8, %r9, %r10, %r11}};
    bar.sync 0;
    and.b32 %r15, %r1, 15;
    shl.b32 %r15, %r15, 6;                  // row (lane % 16) * 64 bytes
    shr.u32 %r16, %r1, 4;
    shl.b32 %r16, %r16, 4;                  // + chunk (lane / 16) * 16 bytes
    add.u32 %r17, %r15, %r16;
    {swz("%r17", "%r18")}
    add.u32 %r18, %r18, %r3;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r4, %r5, %r6, %r7}}, [%r18];
    shl.b32 %r19, %r1, 4;
    cvt.u64.u32 %rd5, %r19;
    add.u64 %rd6, %rd2, %rd5;
    st.global.v4.b32 [%rd6], {{%r4, %r5, %r6, %r7}};
    ret;
}}
"""


def shared_width(store: str, scale: int) -> str:
    """One warp stores with ``store`` (its operands: ``[%r3], ...``) at
    ``tile + lane * scale`` and reads the tile back to ``dst`` as words."""
    return HEAD.format(arch="sm_80") + f"""
.visible .entry widths(.param .u64 dst)
{{
    .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .f32 %f<4>;
    .shared .align 16 .b8 tile[{32 * scale}];
    ld.param.u64 %rd1, [dst];
    mov.u32 %r1, %tid.x;
    cvt.rn.f32.u32 %f1, %r1;
    add.f32 %f2, %f1, 0f3F000000;
    mov.b64 %rd2, {{%f1, %f2}};
    mul.lo.u32 %r2, %r1, {scale};
    mov.u32 %r4, tile;
    add.u32 %r3, %r4, %r2;
    {store}
    bar.sync 0;
    shl.b32 %r5, %r1, 2;
    add.u32 %r6, %r4, %r5;
    ld.shared.b32 %r7, [%r6];
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    st.global.b32 [%rd4], %r7;
    ret;
}}
"""


MMA_SYNC = HEAD.format(arch="sm_80") + """
.visible .entry mma(.param .u64 dst)
{
    .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .f32 %f<12>;
    ld.param.u64 %rd1, [dst];
    mov.b32 %r1, 0x3F803F80;                // bf16x2 (1.0, 1.0)
    mov.f32 %f1, 0f00000000;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f4, %f5, %f6, %f7}, {%r1, %r1, %r1, %r1}, {%r1, %r1}, {%f1, %f1, %f1, %f1};
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd2, %r2, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.f32 [%rd3], %f4;
    ret;
}
"""
