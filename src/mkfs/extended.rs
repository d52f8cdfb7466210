//! `mkfs.jbdfs -E`: mke2fs's extended options that an ext3 filesystem has,
//! parsed into [`MkfsOptions`]; any other is refused by name.

use super::{MkfsError, MkfsOptions, Result};

/// The options `-E` takes, for the error that names an unknown one.
pub const EXTENDED_OPTIONS: &str =
    "root_owner[=uid:gid], lazy_itable_init[=0|1], stride=, stripe_width=, hash_seed=UUID, discard, nodiscard";

/// Applies `-E OPTS` (comma-separated) to `opts`.
pub fn parse_extended(list: &str, opts: &mut MkfsOptions) -> Result<()> {
    for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let bad = |why: &str| MkfsError::BadExtended {
            option: opt.to_string(),
            why: why.to_string(),
        };
        let number = |v: Option<&str>| -> Result<u32> {
            v.and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| bad("needs a number of blocks"))
        };
        match name {
            "root_owner" => {
                opts.root_owner = Some(match value {
                    None => {
                        // SAFETY: getuid and getgid have no preconditions.
                        unsafe { (libc::getuid(), libc::getgid()) }
                    }
                    Some(v) => v
                        .split_once(':')
                        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
                        .ok_or_else(|| bad("takes uid:gid, two numbers"))?,
                });
            }
            "lazy_itable_init" => {
                opts.lazy_itable_init = match value {
                    None | Some("1") => true,
                    Some("0") => false,
                    Some(_) => return Err(bad("takes 0 or 1")),
                };
            }
            "stride" => {
                let n = number(value)?;
                opts.stride =
                    Some(u16::try_from(n).map_err(|_| bad("is stored in 16 bits: at most 65535"))?);
            }
            "stripe_width" | "stripe-width" => opts.stripe_width = Some(number(value)?),
            "hash_seed" => {
                let v = value.ok_or_else(|| bad("needs a UUID"))?;
                opts.hash_seed =
                    Some(crate::util::parse_uuid(v).ok_or_else(|| bad("is not a valid UUID"))?);
            }
            "discard" if value.is_none() => opts.discard = true,
            "nodiscard" if value.is_none() => opts.discard = false,
            _ => return Err(MkfsError::UnknownExtended(opt.to_string())),
        }
    }
    if let (Some(stride), Some(width)) = (opts.stride, opts.stripe_width) {
        if stride != 0 && width % u32::from(stride) != 0 {
            // mke2fs warns; the kernel's allocator wants a multiple.
            return Err(MkfsError::BadExtended {
                option: format!("stripe_width={width}"),
                why: format!("must be a multiple of stride={stride}"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_parses_and_an_unknown_one_is_named() {
        let mut o = MkfsOptions::default();
        parse_extended(
            "root_owner=1000:100,lazy_itable_init=0,stride=16,stripe_width=64,nodiscard,\
             hash_seed=01234567-89ab-cdef-0123-456789abcdef",
            &mut o,
        )
        .unwrap();
        assert_eq!(o.root_owner, Some((1000, 100)));
        assert!(!o.lazy_itable_init && !o.discard);
        assert_eq!((o.stride, o.stripe_width), (Some(16), Some(64)));
        assert_eq!(o.hash_seed.unwrap()[0], 0x01);
        let e = parse_extended("stride=4,frob=1", &mut o).unwrap_err();
        assert!(e.to_string().contains("'frob=1'"), "{e}");
        let e = parse_extended("root_owner=me", &mut o).unwrap_err();
        assert!(e.to_string().contains("root_owner=me"), "{e}");
        assert!(parse_extended("stride=70000", &mut o).is_err());
        assert!(parse_extended("stride=3,stripe_width=8", &mut o).is_err());
    }
}
