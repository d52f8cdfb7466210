//! mke2fs.conf's usage types for `mkfs.jbdfs -T TYPE`: the profile is
//! read from `$MKE2FS_CONFIG` or /etc/mke2fs.conf, or, when there is none,
//! taken from mke2fs's built-in copy, and the values of `[defaults]`, then
//! of `ext3`, then of each usage type in turn (later ones win), give the
//! block size, inode ratio, inode size and reserved ratio that the command
//! line does not.

use std::collections::BTreeMap;

use super::{MkfsError, Result};

/// mke2fs's built-in profile (misc/mke2fs.conf.in of e2fsprogs 1.47), the
/// part an ext3 filesystem reads.
const BUILTIN: &str = "
[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384

[fs_types]
	ext3 = {
		features = has_journal
	}
	small = {
		blocksize = 1024
		inode_ratio = 4096
	}
	floppy = {
		blocksize = 1024
		inode_ratio = 8192
	}
	big = {
		inode_ratio = 32768
	}
	huge = {
		inode_ratio = 65536
	}
	news = {
		inode_ratio = 4096
	}
	largefile = {
		inode_ratio = 1048576
		blocksize = -1
	}
	largefile4 = {
		inode_ratio = 4194304
		blocksize = -1
	}
	hurd = {
	     blocksize = 4096
	     inode_size = 128
	     warn_y2038_dates = 0
	}
";

/// What a usage type sets; `None` where nothing in the profile says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageDefaults {
    pub block_size: Option<u32>,
    pub inode_ratio: Option<u64>,
    pub inode_size: Option<u16>,
    pub reserved_percent: Option<f64>,
}

/// A parsed profile: `[defaults]` and each `[fs_types]` entry's relations.
#[derive(Debug, Default)]
struct Profile {
    defaults: BTreeMap<String, String>,
    types: BTreeMap<String, BTreeMap<String, String>>,
}

/// The defaults for `types` (comma-separated, as `-T` takes them).
pub fn usage_defaults(types: &str) -> Result<UsageDefaults> {
    let path = std::env::var_os("MKE2FS_CONFIG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/mke2fs.conf".into());
    let (text, name) = match std::fs::read_to_string(&path) {
        Ok(t) => (t, path.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (BUILTIN.to_string(), "mke2fs's built-in profile".to_string())
        }
        Err(e) => return Err(MkfsError::Io(e)),
    };
    resolve(&text, &name, types)
}

/// mke2fs's size type, the usage type when `-T` gives none.
pub fn size_type(bytes: u64) -> &'static str {
    match bytes {
        b if b < 3 << 20 => "floppy",
        b if b < 512 << 20 => "small",
        b if b >= 16 << 40 => "huge",
        b if b >= 4 << 40 => "big",
        _ => "default",
    }
}

fn resolve(text: &str, name: &str, types: &str) -> Result<UsageDefaults> {
    let profile = parse(text).map_err(|why| MkfsError::BadProfile {
        path: name.to_string(),
        why,
    })?;
    let mut chain: Vec<&BTreeMap<String, String>> = vec![&profile.defaults];
    chain.extend(profile.types.get("ext3"));
    for t in types.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        // mke2fs's size type for an ordinary size, in no profile.
        if t == "default" && !profile.types.contains_key(t) {
            continue;
        }
        let Some(rel) = profile.types.get(t) else {
            return Err(MkfsError::UnknownUsageType {
                name: t.to_string(),
                profile: name.to_string(),
            });
        };
        chain.push(rel);
    }
    let last = |key: &str| chain.iter().rev().find_map(|m| m.get(key));
    let bad = |key: &str, v: &str| MkfsError::BadProfile {
        path: name.to_string(),
        why: format!("{key} = {v} is not a number"),
    };
    let int = |key: &str| -> Result<Option<i64>> {
        last(key)
            .map(|v| v.parse::<i64>().map_err(|_| bad(key, v)))
            .transpose()
    };
    let block_size = match int("blocksize")? {
        // -1: the page size, as mke2fs takes it (4096 on the machines
        // jbdfs's images are for; never above).
        Some(-1) => Some(4096),
        Some(b) => Some(u32::try_from(b).map_err(|_| bad("blocksize", &b.to_string()))?),
        None => None,
    };
    let inode_ratio = int("inode_ratio")?
        .map(|r| u64::try_from(r).map_err(|_| bad("inode_ratio", &r.to_string())))
        .transpose()?;
    let inode_size = int("inode_size")?
        .map(|r| u16::try_from(r).map_err(|_| bad("inode_size", &r.to_string())))
        .transpose()?;
    let reserved_percent = last("reserved_ratio")
        .map(|v| v.parse::<f64>().map_err(|_| bad("reserved_ratio", v)))
        .transpose()?;
    Ok(UsageDefaults {
        block_size,
        inode_ratio,
        inode_size,
        reserved_percent,
    })
}

/// Reads the profile's `[defaults]` relations and `[fs_types]` entries
/// (one level of braces); other sections are skipped.
fn parse(text: &str) -> std::result::Result<Profile, String> {
    let mut p = Profile::default();
    let mut section = String::new();
    let mut open: Option<String> = None;
    let mut depth = 0usize;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if depth == 0 && line.starts_with('[') {
            section = line
                .strip_prefix('[')
                .and_then(|l| l.strip_suffix(']'))
                .ok_or_else(|| format!("line {}: bad section header '{line}'", n + 1))?
                .trim()
                .to_string();
            continue;
        }
        if line == "}" {
            depth = depth
                .checked_sub(1)
                .ok_or_else(|| format!("line {}: '}}' without '{{'", n + 1))?;
            if depth == 0 {
                open = None;
            }
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| format!("line {}: expected 'name = value', got '{line}'", n + 1))?;
        if value == "{" {
            if depth == 0 && section == "fs_types" {
                open = Some(key.to_string());
                p.types.entry(key.to_string()).or_default();
            }
            depth += 1;
            continue;
        }
        let value = value.trim_matches('"').to_string();
        match (section.as_str(), depth, &open) {
            ("defaults", 0, _) => {
                p.defaults.insert(key.to_string(), value);
            }
            ("fs_types", 1, Some(t)) => {
                p.types
                    .entry(t.clone())
                    .or_default()
                    .insert(key.to_string(), value);
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed '{'".into());
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_types_resolve_as_mke2fs_reads_them() {
        let d = resolve(BUILTIN, "builtin", "news").unwrap();
        assert_eq!(d.block_size, Some(4096));
        assert_eq!(d.inode_ratio, Some(4096));
        assert_eq!(d.inode_size, Some(256));
        let d = resolve(BUILTIN, "builtin", "largefile").unwrap();
        assert_eq!((d.block_size, d.inode_ratio), (Some(4096), Some(1 << 20)));
        let d = resolve(BUILTIN, "builtin", "small,hurd").unwrap();
        assert_eq!((d.block_size, d.inode_size), (Some(4096), Some(128)));
        assert_eq!(d.inode_ratio, Some(4096));
    }

    #[test]
    fn unknown_types_and_bad_profiles_are_named() {
        let e = resolve(BUILTIN, "builtin", "bogus").unwrap_err();
        assert!(e.to_string().contains("'bogus'"), "{e}");
        let e = resolve("[fs_types]\n x = {\n blocksize = big\n }\n", "p", "x").unwrap_err();
        assert!(e.to_string().contains("blocksize = big"), "{e}");
        assert!(resolve("[fs_types]\n x = {\n", "p", "x").is_err());
    }
}
