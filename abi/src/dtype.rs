//! Element types: torch.export's codes, DLPack's codes, sizes and names in one table.

use crate::DLDataType;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    U8,
    I8,
    I16,
    I32,
    I64,
    F16,
    F32,
    F64,
    Bool,
    BF16,
}

// (dtype, torch.export code, DLPack code, bits, name as torch prints it, safetensors name)
const TABLE: &[(DType, i64, u8, u8, &str, &str)] = &[
    (DType::U8, 1, 1, 8, "uint8", "U8"),
    (DType::I8, 2, 0, 8, "int8", "I8"),
    (DType::I16, 3, 0, 16, "int16", "I16"),
    (DType::I32, 4, 0, 32, "int32", "I32"),
    (DType::I64, 5, 0, 64, "int64", "I64"),
    (DType::F16, 6, 2, 16, "float16", "F16"),
    (DType::F32, 7, 2, 32, "float32", "F32"),
    (DType::F64, 8, 2, 64, "float64", "F64"),
    (DType::Bool, 12, 6, 8, "bool", "BOOL"),
    (DType::BF16, 13, 4, 16, "bfloat16", "BF16"),
];

impl DType {
    fn row(self) -> &'static (DType, i64, u8, u8, &'static str, &'static str) {
        TABLE.iter().find(|r| r.0 == self).expect("every dtype has a table row")
    }

    /// Every dtype aotc knows.
    pub fn all() -> impl Iterator<Item = DType> {
        TABLE.iter().map(|r| r.0)
    }

    /// From torch.export's `ScalarType` code.
    pub fn from_torch_code(code: i64) -> Option<DType> {
        TABLE.iter().find(|r| r.1 == code).map(|r| r.0)
    }

    pub fn from_dlpack(t: DLDataType) -> Option<DType> {
        if t.lanes != 1 {
            return None;
        }
        TABLE.iter().find(|r| r.2 == t.code && r.3 == t.bits).map(|r| r.0)
    }

    pub fn from_safetensors_name(name: &str) -> Option<DType> {
        TABLE.iter().find(|r| r.5 == name).map(|r| r.0)
    }

    pub fn to_dlpack(self) -> DLDataType {
        let r = self.row();
        DLDataType { code: r.2, bits: r.3, lanes: 1 }
    }

    pub fn size(self) -> usize {
        self.row().3 as usize / 8
    }

    pub fn name(self) -> &'static str {
        self.row().4
    }

    pub fn safetensors_name(self) -> &'static str {
        self.row().5
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64 | DType::BF16)
    }

    /// The lowest and highest value of an integer (or bool) dtype; int64's for the rest.
    pub fn int_range(self) -> (i64, i64) {
        match self {
            DType::Bool => (0, 1),
            DType::U8 => (0, u8::MAX as i64),
            DType::I8 => (i8::MIN as i64, i8::MAX as i64),
            DType::I16 => (i16::MIN as i64, i16::MAX as i64),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            _ => (i64::MIN, i64::MAX),
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
