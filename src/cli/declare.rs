//! The one place a setting is declared: the `settings!` macro.
//!
//! Each field of a group is one setting. Its clap attributes give its flag, environment
//! variable and default, its doc comment the help (the first paragraph for `-h`, all of it for
//! `--help`, line breaks as written), and `#[toml = "key"]` its key in the config file ("" for
//! a flag the file does not take; a dotted key is read by the table it names).
//! The macro writes the struct (every field an `Option`: `None` when nothing gave it), the list
//! of (setting, key) pairs, reading the group from a TOML table, and the layering of flags and
//! environment over the file.

/// See the module documentation.
macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub(crate) struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[toml = $key:literal]
                $(#[$field_meta:meta])*
                $field:ident: $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        pub(crate) struct $name {
            $(
                $(#[doc = $doc])*
                // The doc comment's line breaks are the help's: clap wraps nothing here.
                #[arg(verbatim_doc_comment)]
                $(#[$field_meta])*
                pub(crate) $field: Option<$ty>,
            )*
        }

        impl $name {
            /// Each setting's name (its clap id) and its key in the config file.
            #[allow(dead_code)] // read by the tests that check the declarations agree
            pub(crate) const KEYS: &'static [(&'static str, &'static str)] =
                &[$((stringify!($field), $key)),*];

            /// Takes this group's keys out of `table`, the config file's top level or the
            /// table `prefix` names (`"limits."`).
            pub(crate) fn from_table(
                table: &mut toml::Table,
                prefix: &str,
            ) -> Result<Self, String> {
                Ok(Self {
                    $($field: crate::cli::file::take::<$ty>(table, $key, prefix)?,)*
                })
            }

            /// Each setting as the command line or the environment gave it (`given`), else
            /// as `file` gave it, else its default (which clap put in `self`).
            pub(crate) fn over(self, file: Self, given: &dyn Fn(&str) -> bool) -> Self {
                Self {
                    $($field: if given(stringify!($field)) {
                        self.$field
                    } else {
                        file.$field.or(self.$field)
                    },)*
                }
            }
        }
    };
}

pub(crate) use settings;
