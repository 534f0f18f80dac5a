-- Placeholder: filled in by the change that adds this area.
SELECT 1;
