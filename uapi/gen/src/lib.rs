//! The generators of the files derived from the ABI: the C header
//! ([`c`]), the kernel module's header ([`kmod`]), the Python constants
//! of the device node ([`py`]) and the tenant node ([`py_tenant`]), and
//! the register reference `docs/registers.md` ([`registers_md`]). The
//! `gen_*` examples of `gpupm-uapi` print them; the tests of `gpupm-uapi`
//! check that the committed files equal what they render.

pub mod c;
pub mod kmod;
pub mod py;
pub mod py_tenant;
pub mod registers_md;
