// The filter builder: rows of field, operator and value that write a predicate in KQuery's
// language into the predicate box (the box stays the query's one source, so a built query is a
// link like a typed one). Values are quoted for the language here; the server checks the result.

/** Operators offered, with how each writes its clause. */
export const operators = [
  { label: '=', write: (f, v) => `${f} == ${v}` },
  { label: '≠', write: (f, v) => `${f} != ${v}` },
  { label: '<', write: (f, v) => `${f} < ${v}` },
  { label: '≤', write: (f, v) => `${f} <= ${v}` },
  { label: '>', write: (f, v) => `${f} > ${v}` },
  { label: '≥', write: (f, v) => `${f} >= ${v}` },
  { label: 'begins with', write: (f, v) => `${f} BEGINSWITH ${v}`, kind: 'text' },
  { label: 'list contains', write: (f, v) => `${f} CONTAINS ${v}` },
  { label: 'is one of', write: (f, v) => `${f} IN ${v}`, list: true },
  // Token search is over the record's SEARCHABLE fields together (allTokens): no field.
  { label: 'record has all words', write: (f, v) => `ALL tokenize(${v}, 'cdl') IN allTokens`, kind: 'text', recordWide: true },
  { label: 'within km of', write: (f, v) => `distanceToLocation:fromLocation:(${f}, ${v.location}) < ${v.kilometres}`, kind: 'location' },
];

const keywords = new Set(['AND', 'OR', 'NOT', 'IN', 'CONTAINS', 'BEGINSWITH', 'ENDSWITH', 'LIKE', 'MATCHES', 'ANY', 'ALL', 'SOME', 'NONE',
  'BETWEEN', 'TRUEPREDICATE', 'FALSEPREDICATE', 'NULL', 'NIL', 'TRUE', 'FALSE', 'YES', 'NO', 'SELF', 'FIRST', 'LAST', 'SIZE', 'CAST']);

/** A field name as the language reads it: `#` before one spelled like a keyword. */
export function fieldName(name) {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`"${name}" is not a field name (letters, digits and _)`);
  return keywords.has(name.toUpperCase()) ? `#${name}` : name;
}

/** A string literal: double quotes, with backslash and quote escaped. */
export function quoted(text) {
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** One value typed in the builder as a literal: numbers stay numbers unless `kind` says text. */
export function literal(text, kind) {
  const trimmed = text.trim();
  if (kind === 'date') {
    if (Number.isNaN(Date.parse(trimmed))) throw new Error(`"${trimmed}" is not a date (2024-05-01 or 2024-05-01T12:00:00Z)`);
    return `date(${quoted(trimmed)})`;
  }
  if (kind === 'number' || (kind === 'auto' && /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(trimmed))) {
    if (!/^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(trimmed)) throw new Error(`"${trimmed}" is not a number`);
    return trimmed;
  }
  if (kind === 'auto' && /^(true|false)$/i.test(trimmed)) return trimmed.toUpperCase();
  return quoted(kind === 'auto' ? trimmed : text);
}

/** The clause a row writes. `row`: {field, operator (an index of `operators`), value, kind}. */
export function clause(row) {
  const operator = operators[row.operator];
  if (!operator) throw new Error('choose an operator');
  if (operator.recordWide) {
    if (!row.value.trim()) throw new Error('record has all words: give the words');
    return operator.write(null, quoted(row.value.trim()));
  }
  const field = fieldName(row.field.trim());
  if (operator.kind === 'location') {
    const parts = row.value.split(/[\s,]+/).filter(Boolean).map(Number);
    if (parts.length !== 3 || parts.some(Number.isNaN)) throw new Error('within km of: give "latitude, longitude, kilometres"');
    return operator.write(field, { location: `location(${parts[0]}, ${parts[1]})`, kilometres: parts[2] });
  }
  const kind = operator.kind === 'text' ? 'text' : row.kind;
  if (operator.list) {
    const items = row.value.split(',').map((v) => v.trim()).filter((v) => v !== '');
    if (!items.length) throw new Error('is one of: give values separated by commas');
    return operator.write(field, `{${items.map((v) => literal(v, kind)).join(', ')}}`);
  }
  return operator.write(field, literal(row.value, kind));
}

/** The predicate the rows write, joined with AND (TRUEPREDICATE for none). */
export function predicate(rows) {
  const clauses = rows.filter((r) => r.field.trim() !== '' || operators[r.operator]?.recordWide).map(clause);
  return clauses.length ? clauses.join(' AND ') : 'TRUEPREDICATE';
}
